package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
)

// TestAuth: with a token configured, a request without it or with another
// is 401 unauthenticated with a typed body (and says nothing of the
// route), the right token works, and /healthz and /readyz stay open.
func TestAuth(t *testing.T) {
	const token = "s3cret-token"
	r := newRig(t, rigOptions{token: token, workers: []string{}, metrics: true})
	for _, tc := range []struct {
		name, header string
	}{
		{"none", ""},
		{"wrong", "Bearer not-the-token"},
		{"a prefix of it", "Bearer s3cret"},
		{"another scheme", "Basic " + token},
		{"no scheme", token},
	} {
		for _, path := range []string{"/v1/worlds", "/v1/workers", "/metrics", "/v1/no-such-route"} {
			req, err := http.NewRequestWithContext(r.Ctx, http.MethodGet, r.HTTP.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := r.HTTP.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e api.Error
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || err != nil || e.Code != api.CodeUnauthenticated || e.Message == "" ||
				!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s token on %s: %d %+v %v", tc.name, path, resp.StatusCode, e, err)
			}
		}
	}
	anon := must(api.NewClient(r.HTTP.URL, "", api.WithHTTPClient(r.HTTP.Client())))(t)
	if err := anon.Health(r.Ctx); err != nil {
		t.Fatalf("healthz needs no token: %v", err)
	}
	if err := anon.Ready(r.Ctx); err != nil {
		t.Fatalf("readyz needs no token: %v", err)
	}
	_, err := anon.ListWorlds(r.Ctx, "", "")
	apiError(t, err, http.StatusUnauthorized, api.CodeUnauthenticated)
	if _, _, err := r.Client.CreateWorld(r.Ctx, "x", universe); err != nil {
		t.Fatalf("the right token: %v", err)
	}
	if status, _ := r.Do(http.MethodGet, "/metrics", "", "", token); status != http.StatusOK {
		t.Fatalf("metrics with the token: %d", status)
	}
}

// TestListenRefusesInsecureAddresses: without a token only loopback
// addresses may be opened; with one, any.
func TestListenRefusesInsecureAddresses(t *testing.T) {
	ctx := context.Background()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.com:0", "10.1.2.3:0"} {
		if ln, err := api.Listen(ctx, addr, "", "", ""); !errors.Is(err, api.ErrInsecure) {
			if ln != nil {
				ln.Close()
			}
			t.Fatalf("Listen(%s) without a token: %v, want ErrInsecure", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := api.Listen(ctx, addr, "", "", "")
		if err != nil {
			t.Fatalf("Listen(%s) without a token: %v", addr, err)
		}
		ln.Close()
	}
	ln, err := api.Listen(ctx, "0.0.0.0:0", "tok", "", "")
	if err != nil {
		t.Fatalf("Listen beyond loopback with a token: %v", err)
	}
	ln.Close()
	if _, err := api.Listen(ctx, "127.0.0.1:0", "", "cert.pem", ""); !errors.Is(err, api.ErrConfig) {
		t.Fatalf("a certificate without its key: %v", err)
	}
}

// TestTLS: with a certificate and key, Listen serves https (here through
// Serve, which shuts down cleanly when its context ends), and a client
// that trusts the certificate talks to the API over it.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	r := newRig(t, rigOptions{token: "tls-token", workers: []string{}})
	ln, err := api.Listen(r.Ctx, "127.0.0.1:0", "tls-token", certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(r.Ctx)
	served := make(chan error, 1)
	go func() { served <- r.Server.Serve(sctx, ln) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve after its context ended: %v", err)
		}
	}()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	c := must(api.NewClient("https://"+ln.Addr().String(), "tls-token", api.WithHTTPClient(&http.Client{Transport: tr})))(t)
	if err := c.Health(r.Ctx); err != nil {
		t.Fatal(err)
	}
	if _, created, err := c.CreateWorld(r.Ctx, "over-tls", universe); err != nil || !created {
		t.Fatalf("create over TLS: %v %v", created, err)
	}
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	pc := must(api.NewClient("http://"+ln.Addr().String(), "tls-token", api.WithHTTPClient(&http.Client{Transport: plain})))(t)
	if err := pc.Health(r.Ctx); err == nil {
		t.Fatal("plain http was answered on the TLS listener")
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns the files and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "orrery test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
