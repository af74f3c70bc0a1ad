package web_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/web"
)

// TestHandlerServesTheFiles: the page at /, its script and style beside
// it with their types, every answer with the headers that keep the page
// to its own origin, and 404 for a file that is not there.
func TestHandlerServesTheFiles(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	for _, c := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", `<script src="app.js" defer></script>`},
		{"/app.js", "text/javascript", "async function stream()"},
		{"/app.css", "text/css", "--accent"},
	} {
		resp, err := srv.Client().Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) ||
			!strings.Contains(string(body), c.contains) {
			t.Fatalf("%s: %d %q, body has %q: %v", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.contains,
				strings.Contains(string(body), c.contains))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("%s: headers %v", c.path, resp.Header)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/nope.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a missing file: %d", resp.StatusCode)
	}
}

// TestAssetsNeedNoOtherOrigin: the machine that serves the dashboard may
// be offline, so no file names another origin (a CDN, a font), and the
// page loads its script and style by relative path, which works under
// any mount point.
func TestAssetsNeedNoOtherOrigin(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["'](https?:)?//|@import|url\(\s*["']?(https?:)?//`)
	err := filepath.WalkDir("static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s loads from another origin: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
