package gatewaykit

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Answer is what one request got.
type Answer struct {
	// Who is the cluster that served it, or "HTTP <code>" for a status other than 200.
	Who string
	// Status is the HTTP status code.
	Status int
	// ServedAt is when the backend served it (zero for a status other than 200).
	ServedAt time.Time
}

// Ask sends one GET to url with the Host header host ("" keeps the URL's).
func Ask(c *http.Client, url, host string) (Answer, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return Answer{}, err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return Answer{}, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Answer{Who: fmt.Sprintf("HTTP %d", resp.StatusCode), Status: resp.StatusCode}, nil
	}
	ns, err := strconv.ParseInt(resp.Header.Get("X-Served-At"), 10, 64)
	if err != nil {
		return Answer{}, fmt.Errorf("answer from %q without X-Served-At: %w", body, err)
	}
	return Answer{Who: string(body), Status: resp.StatusCode, ServedAt: time.Unix(0, ns)}, nil
}

// ProxyClient is an HTTP client for requests through a gateway: no proxy from the
// environment, keep-alive connections, a short timeout.
func ProxyClient() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8},
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago (listen on :0, close).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}
