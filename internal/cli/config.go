package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Settings come from four layers, the first that has a value winning: a
// flag on the command line, an ORRERY_* environment variable, a key in
// the --config file (TOML), the flag's default. Every setting has all
// three names, derived from the flag's so that none can be forgotten:
// --lease-ttl is ORRERY_LEASE_TTL and lease-ttl in the file.
//
// The file is flat: one key per setting, serve's and the global ones side
// by side, so one file serves `orrery serve` and the client commands
// alike; a command applies the keys it has flags for and ignores serve's.

// ErrConfig matches every *ConfigError.
var ErrConfig = errors.New("cli: invalid configuration")

// ConfigError is a setting that cannot be used, named by where it came
// from: the file's key, the environment variable, or the file itself.
type ConfigError struct {
	Source string // "config file F", "environment"
	Key    string // the file key or the variable ("" : the file as a whole)
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return e.Source + ": " + e.Reason
	}
	return e.Source + ": " + e.Key + ": " + e.Reason
}

// Is matches ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// envPrefix starts every setting's environment variable.
const envPrefix = "ORRERY_"

// EnvName is the environment variable of the setting --flag.
func EnvName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// unlayered are flags that are not settings: they say how to run this
// one command, not how the program is configured.
var unlayered = []string{"config", "help"}

// configFile reads a --config file: its keys with their values as the
// flags would take them. Only strings, integers, floats and booleans are
// settings; a duration is a string ("10s").
func configFile(path string) (map[string]string, error) {
	src := "config file " + path
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{Source: src, Reason: errors.Unwrap(err).Error()}
	}
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		return nil, &ConfigError{Source: src, Reason: "not valid TOML: " + err.Error()}
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			out[k] = v
		case int64:
			out[k] = strconv.FormatInt(v, 10)
		case float64:
			out[k] = strconv.FormatFloat(v, 'g', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(v)
		default:
			return nil, &ConfigError{Source: src, Key: k, Reason: fmt.Sprintf("must be a string, a number or a boolean, not %T", v)}
		}
	}
	return out, nil
}

// applyLayers sets each flag of fs not given on the command line from its
// environment variable, else from file; a flag in neither keeps its
// default. known are the keys a file may hold (every command's settings):
// any other key is an error, so a typo does not pass for a default.
// fileName names the file in errors.
func applyLayers(fs *pflag.FlagSet, getenv func(string) string, file map[string]string, fileName string, known map[string]bool) error {
	keys := make([]string, 0, len(file))
	for k := range file {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !known[k] {
			return &ConfigError{Source: "config file " + fileName, Key: k, Reason: "unknown key (the keys are the flags' names, see docs/operations.md)"}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || slices.Contains(unlayered, f.Name) {
			return
		}
		src, key, v := "", "", ""
		if ev := getenv(EnvName(f.Name)); ev != "" {
			src, key, v = "environment", EnvName(f.Name), ev
		} else if fv, ok := file[f.Name]; ok {
			src, key, v = "config file "+fileName, f.Name, fv
		} else {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = &ConfigError{Source: src, Key: key, Reason: fmt.Sprintf("bad value %q: %v", v, unwrapAll(serr))}
		}
	})
	return err
}

// unwrapAll drops the strconv prefix from a flag's parse error.
func unwrapAll(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

// settingNames are the flags of root's global and serve's settings: the
// keys a file may hold.
func settingNames(cmds ...*pflag.FlagSet) map[string]bool {
	out := map[string]bool{}
	for _, fs := range cmds {
		fs.VisitAll(func(f *pflag.Flag) {
			if !slices.Contains(unlayered, f.Name) {
				out[f.Name] = true
			}
		})
	}
	return out
}

// layer fills the settings of cmd that its command line left unset: the
// global flags always, serve's own when cmd is serve (see applyLayers).
func (e *env) layer(root, cmd *cobra.Command) error {
	if !root.PersistentFlags().Changed("config") {
		e.config = e.io.Getenv(EnvName("config"))
	}
	var file map[string]string
	if e.config != "" {
		var err error
		if file, err = configFile(e.config); err != nil {
			return err
		}
	}
	known := settingNames(root.PersistentFlags(), e.serveCmd.LocalNonPersistentFlags())
	if err := applyLayers(root.PersistentFlags(), e.io.Getenv, file, e.config, known); err != nil {
		return err
	}
	if cmd == e.serveCmd {
		return applyLayers(cmd.LocalNonPersistentFlags(), e.io.Getenv, file, e.config, known)
	}
	return nil
}
