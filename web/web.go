package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the dashboard's files from the root of its path (mount
// it under a prefix with http.StripPrefix, as the API server does): the
// page at "/", its script and style beside it.
func Handler() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		// fs.Sub refuses only an invalid name, which "static" is not; an
		// answer rather than a panic all the same.
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "web: the embedded files cannot be served", http.StatusInternalServerError)
		})
	}
	fileServer := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything the page loads is its own: no other origin, no
		// inline script, no framing.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary, which sets no modification
		// time: revalidate rather than cache a stale page.
		h.Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}
