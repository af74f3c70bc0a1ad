package cli

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

// JSONError is how a command reports its failure under -o json: one line
// on stderr, {"error":{...}}, so that stdout holds only results and a
// script reads both as JSON. Code is the API's error code when the server
// refused, else one named after the exit code (usage, not_found,
// conflict, unavailable, unauthenticated, error).
type JSONError struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	ExitCode  int            `json:"exit_code"`
	Status    int            `json:"status,omitempty"` // the HTTP status of an API refusal
	Details   map[string]any `json:"details,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Help      string         `json:"help,omitempty"` // the command whose --help explains its usage
}

// jsonErrors reports whether cmd's failure is written as JSON: under
// -o json, and for `serve --log-format json`, whose every line is JSON.
func (e *env) jsonErrors(cmd *cobra.Command) bool {
	if e.output == "json" {
		return true
	}
	if cmd != nil && cmd == e.serveCmd {
		if f := cmd.Flags().Lookup("log-format"); f != nil && f.Value.String() == "json" {
			return true
		}
	}
	return false
}

// printJSONError writes err as JSON on stderr: a JSONError under -o json,
// a log record (level ERROR) for serve with JSON logs.
func (e *env) printJSONError(cmd *cobra.Command, err error, code int) {
	je := JSONError{Code: codeName(code), Message: err.Error(), ExitCode: code}
	var ae *api.Error
	if errors.As(err, &ae) {
		je.Code, je.Message, je.Status, je.RequestID = ae.Code, ae.Message, ae.Status, ae.RequestID
		if len(ae.Details) > 0 {
			je.Details = ae.Details
		}
	}
	if first, sugg, ok := strings.Cut(je.Message, "\n\nDid you mean this?\n"); ok {
		je.Message = first + " (did you mean " + strings.Join(strings.Fields(sugg), " or ") + "?)"
	}
	if code == ExitUsage {
		je.Help = "orrery --help"
		if cmd != nil {
			je.Help = cmd.CommandPath() + " --help"
		}
	}
	if cmd != nil && cmd == e.serveCmd && e.output != "json" {
		log := slog.New(slog.NewJSONHandler(e.io.Err, nil))
		attrs := []any{"code", je.Code, "exit_code", je.ExitCode}
		if je.Help != "" {
			attrs = append(attrs, "help", je.Help)
		}
		log.Error(je.Message, attrs...)
		return
	}
	b, merr := json.Marshal(struct {
		Error JSONError `json:"error"`
	}{je})
	if merr != nil {
		b = []byte(`{"error":{"code":"error","message":"the error cannot be written as JSON","exit_code":1}}`)
	}
	_, _ = e.io.Err.Write(append(b, '\n'))
}

// codeName names an exit code for a JSONError of no API error.
func codeName(code int) string {
	switch code {
	case ExitUsage:
		return "usage"
	case ExitNotFound:
		return api.CodeNotFound
	case ExitConflict:
		return api.CodeConflict
	case ExitUnavailable:
		return api.CodeUnavailable
	case ExitAuth:
		return api.CodeUnauthenticated
	case ExitOverloaded:
		return api.CodeOverloaded
	}
	return "error"
}
