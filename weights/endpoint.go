package weights

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Endpoint is a parsed entry endpoint: an absolute http or https URL reduced to
// its scheme, host and port.
type Endpoint struct {
	URL    string // as given
	Scheme string // "http" or "https"
	Host   string // hostname, lowercased (an IPv6 zone keeps its case), no port, no brackets
	Port   int32  // explicit port, or 80 for http / 443 for https
}

// parseEndpoint parses raw under the endpoint rules. It returns the endpoint, the
// value to show in an error message (quoted, with any userinfo redacted) and an
// error wrapping ErrEndpointInvalid.
func parseEndpoint(raw string) (Endpoint, string, error) {
	shown := strconv.Quote(raw)
	if raw == "" {
		return Endpoint{}, shown, fmt.Errorf("%w: is empty", ErrEndpointInvalid)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // drop url.Error's own copy of the URL
		}
		return Endpoint{}, shown, fmt.Errorf("%w: %w", ErrEndpointInvalid, err)
	}
	if u.User != nil {
		redacted := *u
		redacted.User = url.User("redacted")
		return Endpoint{}, strconv.Quote(redacted.String()),
			fmt.Errorf("%w: must not contain userinfo", ErrEndpointInvalid)
	}
	if u.Scheme == "" {
		return Endpoint{}, shown, fmt.Errorf("%w: is not absolute (no scheme)", ErrEndpointInvalid)
	}
	scheme := strings.ToLower(u.Scheme)
	var defaultPort int32
	switch scheme {
	case "http":
		defaultPort = 80
	case "https":
		defaultPort = 443
	default:
		return Endpoint{}, shown, fmt.Errorf("%w: scheme %q is not http or https", ErrEndpointInvalid, u.Scheme)
	}
	if u.Opaque != "" {
		return Endpoint{}, shown, fmt.Errorf("%w: must have the form scheme://host[:port]", ErrEndpointInvalid)
	}
	host := u.Hostname()
	if host == "" {
		return Endpoint{}, shown, fmt.Errorf("%w: has no host", ErrEndpointInvalid)
	}
	if p := u.EscapedPath(); p != "" && p != "/" {
		return Endpoint{}, shown, fmt.Errorf("%w: path %q must be empty or \"/\"", ErrEndpointInvalid, p)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return Endpoint{}, shown, fmt.Errorf("%w: must not have a query", ErrEndpointInvalid)
	}
	// A fragment is everything after the first '#', even when it is empty.
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return Endpoint{}, shown, fmt.Errorf("%w: must not have a fragment", ErrEndpointInvalid)
	}
	port := defaultPort
	if strings.HasSuffix(u.Host, ":") {
		return Endpoint{}, shown, fmt.Errorf("%w: port after ':' is empty", ErrEndpointInvalid)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return Endpoint{}, shown, fmt.Errorf("%w: port %q is not between 1 and 65535", ErrEndpointInvalid, p)
		}
		port = int32(n)
	}
	return Endpoint{URL: raw, Scheme: scheme, Host: lowerHost(host), Port: port}, shown, nil
}

// lowerHost lowercases a hostname, leaving an IPv6 zone ("fe80::1%eth0") as given
// because interface names are case-sensitive.
func lowerHost(host string) string {
	if i := strings.IndexByte(host, '%'); i >= 0 {
		return strings.ToLower(host[:i]) + host[i:]
	}
	return strings.ToLower(host)
}
