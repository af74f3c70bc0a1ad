package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// settingsSeen runs `orrery args...` with env and returns the settings
// serve would start with (serve's RunE replaced by a recorder), or the
// error the layering gave.
func settingsSeen(t *testing.T, vars map[string]string, args ...string) (map[string]string, error) {
	t.Helper()
	e := &env{io: IO{Out: &bytes.Buffer{}, Err: &bytes.Buffer{}, Getenv: func(k string) string { return vars[k] }}}
	root := e.rootCommand()
	seen := map[string]string{}
	record := func(cmd *cobra.Command, _ []string) error {
		for _, n := range []string{"store", "lease-ttl", "snapshot-every", "no-orchestrator", "log-format"} {
			if f := cmd.Flags().Lookup(n); f != nil {
				seen[n] = f.Value.String()
			}
		}
		seen["addr"], seen["token"], seen["output"] = e.addr, e.token, e.output
		return nil
	}
	e.serveCmd.RunE = record
	root.SetArgs(args)
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	_, err := root.ExecuteContextC(context.Background())
	return seen, err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "orrery.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSettingsPrecedence: a flag beats its environment variable, which
// beats the config file's key, which beats the default, for serve's
// settings and the global ones alike.
func TestSettingsPrecedence(t *testing.T) {
	file := writeConfig(t, `
store = "file.db"
lease-ttl = "7s"
snapshot-every = 50
no-orchestrator = true
addr = "http://file:1"
token = "file-token"
`)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		key  string
		want string
	}{
		{"default store", nil, nil, "store", "orrery.db"},
		{"file store", nil, []string{"--config", file}, "store", "file.db"},
		{"env store over file", map[string]string{"ORRERY_STORE": "env.db"}, []string{"--config", file}, "store", "env.db"},
		{"flag store over env", map[string]string{"ORRERY_STORE": "env.db"}, []string{"--config", file, "--store", "flag.db"}, "store", "flag.db"},
		{"default lease", nil, nil, "lease-ttl", "10s"},
		{"file lease", nil, []string{"--config", file}, "lease-ttl", "7s"},
		{"env lease", map[string]string{"ORRERY_LEASE_TTL": "3s"}, []string{"--config", file}, "lease-ttl", "3s"},
		{"flag lease", map[string]string{"ORRERY_LEASE_TTL": "3s"}, []string{"--config", file, "--lease-ttl", "2s"}, "lease-ttl", "2s"},
		{"file integer", nil, []string{"--config", file}, "snapshot-every", "50"},
		{"file boolean", nil, []string{"--config", file}, "no-orchestrator", "true"},
		{"env boolean over file", map[string]string{"ORRERY_NO_ORCHESTRATOR": "false"}, []string{"--config", file}, "no-orchestrator", "false"},
		{"config from env", map[string]string{"ORRERY_CONFIG": file}, nil, "store", "file.db"},
		{"default addr", nil, nil, "addr", "http://127.0.0.1:7070"},
		{"file addr", nil, []string{"--config", file}, "addr", "http://file:1"},
		{"env addr", map[string]string{"ORRERY_ADDR": "http://env:2"}, []string{"--config", file}, "addr", "http://env:2"},
		{"flag addr", map[string]string{"ORRERY_ADDR": "http://env:2"}, []string{"--config", file, "--addr", "http://flag:3"}, "addr", "http://flag:3"},
		{"file token", nil, []string{"--config", file}, "token", "file-token"},
		{"env token", map[string]string{"ORRERY_TOKEN": "env-token"}, []string{"--config", file}, "token", "env-token"},
		{"env output", map[string]string{"ORRERY_OUTPUT": "json"}, nil, "output", "json"},
		{"env log format", map[string]string{"ORRERY_LOG_FORMAT": "json"}, nil, "log-format", "json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen, err := settingsSeen(t, tc.env, append([]string{"serve"}, tc.args...)...)
			if err != nil {
				t.Fatalf("serve: %v", err)
			}
			if seen[tc.key] != tc.want {
				t.Fatalf("%s = %q, want %q (all: %v)", tc.key, seen[tc.key], tc.want, seen)
			}
		})
	}
}

// TestSettingsClientCommands: a client command takes the global settings
// from the same file, and ignores serve's keys there instead of refusing
// them.
func TestSettingsClientCommands(t *testing.T) {
	file := writeConfig(t, "store = \"x.db\"\naddr = \"http://file:1\"\n")
	e := &env{io: IO{Out: &bytes.Buffer{}, Err: &bytes.Buffer{}, Getenv: func(string) string { return "" }}}
	root := e.rootCommand()
	var addr string
	for _, c := range root.Commands() {
		if c.Name() == "workers" {
			c.RunE = func(*cobra.Command, []string) error { addr = e.addr; return nil }
		}
	}
	root.SetArgs([]string{"workers", "--config", file})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if addr != "http://file:1" {
		t.Fatalf("addr = %q, want the file's", addr)
	}
}

// TestSettingsErrors: an unknown key, a bad value (from the file or the
// environment) and a file that cannot be read are typed errors naming the
// key, and usage errors to the exit code.
func TestSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown key", "stroe = \"x\"\n", nil, "stroe: unknown key"},
		{"bad duration", "lease-ttl = \"ten\"\n", nil, "lease-ttl: bad value \"ten\""},
		{"bad integer", "snapshot-every = \"many\"\n", nil, "snapshot-every: bad value"},
		{"not a scalar", "store = [\"a\"]\n", nil, "store: must be a string, a number or a boolean"},
		{"bad env", "", map[string]string{"ORRERY_LEASE_TTL": "soon"}, "environment: ORRERY_LEASE_TTL: bad value \"soon\""},
		{"bad toml", "store = \n", nil, "not valid TOML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := settingsSeen(t, tc.env, "serve", "--config", writeConfig(t, tc.file))
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a *ConfigError containing %q", err, tc.want)
			}
			if code := exitCode(err); code != ExitUsage {
				t.Fatalf("exit code %d, want %d", code, ExitUsage)
			}
		})
	}
	_, err := settingsSeen(t, nil, "serve", "--config", filepath.Join(t.TempDir(), "missing.toml"))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestExampleConfigIsValid: the example file in the docs holds only known
// keys with good values.
func TestExampleConfigIsValid(t *testing.T) {
	if _, err := settingsSeen(t, nil, "serve", "--config", "../../docs/orrery.example.toml"); err != nil {
		t.Fatal(err)
	}
}
