package weights_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

func TestEndpointParsing(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    weights.Endpoint // URL is filled in from raw
		wantErr string           // detail after the sentinel; empty when valid
	}{
		{name: "http default port", raw: "http://worker-a.example.com", want: weights.Endpoint{Scheme: "http", Host: "worker-a.example.com", Port: 80}},
		{name: "https default port", raw: "https://worker-a.example.com", want: weights.Endpoint{Scheme: "https", Host: "worker-a.example.com", Port: 443}},
		{name: "root path allowed", raw: "https://worker-a.example.com/", want: weights.Endpoint{Scheme: "https", Host: "worker-a.example.com", Port: 443}},
		{name: "explicit port", raw: "http://worker-a.example.com:8080", want: weights.Endpoint{Scheme: "http", Host: "worker-a.example.com", Port: 8080}},
		{name: "explicit default port", raw: "https://worker-a:443/", want: weights.Endpoint{Scheme: "https", Host: "worker-a", Port: 443}},
		{name: "max port", raw: "http://x:65535", want: weights.Endpoint{Scheme: "http", Host: "x", Port: 65535}},
		{name: "uppercase scheme and host normalized", raw: "HTTPS://Worker-A.Example.COM:8443", want: weights.Endpoint{Scheme: "https", Host: "worker-a.example.com", Port: 8443}},
		{name: "ipv4 host", raw: "http://10.0.0.1:9000", want: weights.Endpoint{Scheme: "http", Host: "10.0.0.1", Port: 9000}},
		{name: "ipv6 literal", raw: "https://[2001:DB8::1]", want: weights.Endpoint{Scheme: "https", Host: "2001:db8::1", Port: 443}},
		{name: "ipv6 zone keeps its case", raw: "http://[FE80::1%25EN0]:81", want: weights.Endpoint{Scheme: "http", Host: "fe80::1%EN0", Port: 81}},
		{name: "ipv6 literal with port", raw: "http://[::1]:8080/", want: weights.Endpoint{Scheme: "http", Host: "::1", Port: 8080}},

		{name: "empty", raw: "", wantErr: "is empty"},
		{name: "ftp scheme", raw: "ftp://worker-a", wantErr: `scheme "ftp" is not http or https`},
		{name: "relative path", raw: "/v1/models", wantErr: "is not absolute (no scheme)"},
		{name: "bare host", raw: "worker-a.example.com", wantErr: "is not absolute (no scheme)"},
		{name: "scheme-relative", raw: "//worker-a.example.com", wantErr: "is not absolute (no scheme)"},
		{name: "host and port without scheme", raw: "worker-a:8080", wantErr: `scheme "worker-a" is not http or https`},
		{name: "missing host", raw: "https://", wantErr: "has no host"},
		{name: "missing host with path", raw: "https:///v1", wantErr: "has no host"},
		{name: "port without host", raw: "https://:443", wantErr: "has no host"},
		{name: "opaque", raw: "https:worker-a", wantErr: "must have the form scheme://host[:port]"},
		{name: "userinfo", raw: "https://user:secret@worker-a", wantErr: "must not contain userinfo"},
		{name: "empty userinfo", raw: "https://@worker-a", wantErr: "must not contain userinfo"},
		{name: "path", raw: "https://worker-a/v1", wantErr: `path "/v1" must be empty or "/"`},
		{name: "double slash path", raw: "https://worker-a//", wantErr: `path "//" must be empty or "/"`},
		{name: "query", raw: "https://worker-a/?x=1", wantErr: "must not have a query"},
		{name: "empty query", raw: "https://worker-a?", wantErr: "must not have a query"},
		{name: "fragment", raw: "https://worker-a#top", wantErr: "must not have a fragment"},
		{name: "empty fragment", raw: "https://worker-a#", wantErr: "must not have a fragment"},
		{name: "port zero", raw: "http://worker-a:0", wantErr: `port "0" is not between 1 and 65535`},
		{name: "port too large", raw: "http://worker-a:65536", wantErr: `port "65536" is not between 1 and 65535`},
		{name: "empty port", raw: "http://worker-a:", wantErr: "port after ':' is empty"},
		{name: "non-numeric port", raw: "http://worker-a:http", wantErr: `invalid port ":http" after host`},
		{name: "unbracketed ipv6", raw: "http://::1", wantErr: `invalid port "::1" after host`},
		{name: "unterminated ipv6", raw: "http://[::1", wantErr: "missing ']' in host"},
		{name: "leading space", raw: " http://worker-a", wantErr: "first path segment in URL cannot contain colon"},
		{name: "space in host", raw: "http://worker a", wantErr: `invalid character " " in host name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "worker-a", Endpoint: tc.raw, Weight: 1}}})
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Len(t, got.Entries, 1)
				want := tc.want
				want.URL = tc.raw
				assert.Equal(t, want, got.Entries[0].Endpoint)
				return
			}
			require.ErrorIs(t, err, weights.ErrEndpointInvalid)
			var ee *weights.EntryError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, "endpoint", ee.Field)
			assert.EqualError(t, ee.Err, "must be an absolute http or https URL: "+tc.wantErr)
			assert.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestEndpointErrorMessage(t *testing.T) {
	_, err := weights.Compute(weights.Input{Entries: []weights.Entry{
		entry("worker-a", 1),
		{Cluster: "worker-b", Endpoint: "ftp://x", Weight: 1},
	}})
	assert.EqualError(t, err, `spec.entries[1] (cluster "worker-b"): endpoint "ftp://x": must be an absolute http or https URL: scheme "ftp" is not http or https`)

	_, err = weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "worker-a", Endpoint: "https://admin:hunter2@worker-a", Weight: 1}}})
	assert.EqualError(t, err, `spec.entries[0] (cluster "worker-a"): endpoint "https://redacted@worker-a": must be an absolute http or https URL: must not contain userinfo`)
}
