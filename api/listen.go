package api

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// ErrInsecure: an address other than loopback without a token. The
// server refuses to start rather than serve the ops API to the network
// without authentication.
var ErrInsecure = errors.New("api: refusing to listen beyond loopback without a token")

// Listen checks the authentication rule for addr and listens on it: an
// address that is not loopback (an unspecified host such as ":8080" or
// "0.0.0.0:8080" included, and any host name but "localhost", which
// could resolve anywhere) needs a token, else ErrInsecure and nothing is
// opened. With certFile and keyFile (both or neither) the listener serves
// TLS.
func Listen(ctx context.Context, addr, token, certFile, keyFile string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &ConfigError{Field: "addr", Reason: err.Error()}
	}
	if token == "" && !loopback(host) {
		return nil, ErrInsecure
	}
	if (certFile == "") != (keyFile == "") {
		return nil, &ConfigError{Field: "TLS", Reason: "give both the certificate and the key file, or neither"}
	}
	var cfg *tls.Config
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, &ConfigError{Field: "TLS", Reason: err.Error()}
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return ln, nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Timeouts of Serve's http.Server. Writes may take as long as the
// longest call or journal wait the server allows, plus this margin.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = time.Minute
	IdleTimeout       = 2 * time.Minute
	writeMargin       = 30 * time.Second
	// ShutdownTimeout bounds how long Serve waits for the requests in
	// flight once its context ends.
	ShutdownTimeout = 30 * time.Second
)

// Serve answers on ln (from Listen) until ctx ends, then stops accepting
// and waits up to ShutdownTimeout for the requests in flight; it returns
// nil after a clean shutdown, or why serving stopped otherwise. ln is
// closed when Serve returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      max(s.cfg.CallTimeout, s.cfg.JournalWaitMax) + writeMargin,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// Requests in flight finish after ctx ends (Shutdown waits for
		// them); event streams, which never finish, end with ctx.
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.WithoutCancel(ctx), serveDoneKey{}, ctx.Done())
		},
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
