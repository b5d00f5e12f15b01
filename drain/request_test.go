package drain

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequestValidate(t *testing.T) {
	ok := Request{Action: ActionDrain, ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}
	with := func(change func(*Request)) Request { r := ok; change(&r); return r }
	for _, tc := range []struct {
		name string
		req  Request
		want error
	}{
		{"seed drain", ok, nil},
		{"undrain", Request{Action: ActionUndrain, ID: "maintenance-a"}, nil},
		{"unknown action", with(func(r *Request) { r.Action = "pause" }), ErrAction},
		{"empty id", with(func(r *Request) { r.ID = "" }), ErrID},
		{"uppercase id", with(func(r *Request) { r.ID = "Maint" }), ErrID},
		{"id with dot", with(func(r *Request) { r.ID = "a.b" }), ErrID},
		{"id of 64", with(func(r *Request) { r.ID = strings.Repeat("a", 64) }), ErrID},
		{"id of 63", with(func(r *Request) { r.ID = strings.Repeat("a", 63) }), nil},
		{"id that is a key", with(func(r *Request) { r.ID = "sk-" + strings.Repeat("a", 20) }), ErrID},
		{"undrain with cluster", Request{Action: ActionUndrain, ID: "m", Cluster: "worker-a"}, ErrUndrainOnlyID},
		{"undrain with reason", Request{Action: ActionUndrain, ID: "m", Reason: "x"}, ErrUndrainOnlyID},
		{"undrain bad id first", Request{Action: ActionUndrain, ID: "M", Cluster: "x"}, ErrID},
		{"empty cluster", with(func(r *Request) { r.Cluster = "" }), ErrCluster},
		{"cluster subdomain", with(func(r *Request) { r.Cluster = "worker-a.eu-1" }), nil},
		{"cluster uppercase", with(func(r *Request) { r.Cluster = "Worker-A" }), ErrCluster},
		{"cluster of 254", with(func(r *Request) { r.Cluster = strings.Repeat("a.", 127) }), ErrCluster},
		{"empty reason", with(func(r *Request) { r.Reason = "" }), ErrReason},
		{"untrimmed reason", with(func(r *Request) { r.Reason = " planned" }), ErrReason},
		{"reason with newline", with(func(r *Request) { r.Reason = "planned\nmaintenance" }), ErrReason},
		{"reason with tab", with(func(r *Request) { r.Reason = "planned\tmaintenance" }), ErrReason},
		{"reason with line separator", with(func(r *Request) { r.Reason = "a\u2028b" }), ErrReason},
		{"reason with zero-width space", with(func(r *Request) { r.Reason = "a\u200bb" }), ErrReason},
		{"reason of 257 bytes", with(func(r *Request) { r.Reason = strings.Repeat("a", 257) }), ErrReason},
		{"reason of 256 bytes", with(func(r *Request) { r.Reason = strings.Repeat("a", 256) }), nil},
		{"reason invalid utf-8", with(func(r *Request) { r.Reason = "a\xffb" }), ErrReason},
		{"reason with em-dash, quotes, <>", with(func(r *Request) { r.Reason = `kernel — "patch" <1> \ ok` }), nil},
		{"reason with sk- key", with(func(r *Request) { r.Reason = "token sk-abcdefghijklmnopqrstuvwx" }), ErrReason},
		{"reason that is a jwt", with(func(r *Request) {
			r.Reason = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
		}), ErrReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, tc.want.Error(), err.Error(), "the message is exactly OME's")
		})
	}
}

func TestSafeScalar(t *testing.T) {
	for v, want := range map[string]bool{
		"worker-a":                        true,
		"a_b.c/e@f+g-h:1":                 true,
		"":                                false,
		strings.Repeat("a", 256):          true,
		strings.Repeat("a", 257):          false,
		"has space":                       false,
		"user@host":                       true,
		"user:pw@host":                    false,
		"https://user:pw@host":            false,
		"https://user@host":               true,
		"sk-" + strings.Repeat("x", 20):   false,
		"a-sk-" + strings.Repeat("x", 20): false,
		"ask-" + strings.Repeat("x", 20):  true,
		strings.Repeat("a", 16) + "." + strings.Repeat("b", 16) + "." + strings.Repeat("c", 16): false,
	} {
		assert.Equal(t, want, SafeScalar(v), "%q", v)
	}
}

// TestReasonCredentialFilter: every credential shape is refused, wherever it sits in the
// reason, and ordinary reasons pass.
func TestReasonCredentialFilter(t *testing.T) {
	refused := map[string]string{
		"sk- key (OME)":           "rotate sk-abcdefghijklmnopqrstuvwx now",
		"jwt (OME)":               "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"github ghp_":             "leaked ghp_" + strings.Repeat("A1b2", 9),
		"github gho_":             "gho_" + strings.Repeat("x", 36),
		"github ghu_":             "ghu_" + strings.Repeat("x", 36),
		"github ghs_":             "(ghs_" + strings.Repeat("x", 36) + ")",
		"github ghr_":             "ghr_" + strings.Repeat("x", 36),
		"github fine-grained pat": "github_pat_11ABCDEFG0" + strings.Repeat("a_b", 20),
		"aws AKIA":                "key AKIAIOSFODNN7EXAMPLE in the logs",
		"aws ASIA":                "ASIAIOSFODNN7EXAMPLE",
		"aws at the end":          "saw AKIAIOSFODNN7EXAMPLE",
		"slack xoxb":              "xoxb-123456789012-1234567890123-abcdefghijklmnop",
		"slack xoxp":              "bot xoxp-1234567890-abc",
		"slack xoxa":              "xoxa-2-abcdefghij",
		"slack xoxr":              "xoxr-abcdefghij",
		"slack xoxs":              "xoxs-abcdefghij",
		"password=":               "db password=hunter2",
		"PASSWORD: (case, colon)": "PASSWORD: hunter2",
		"Password = (spaces)":     "Password = hunter2",
		"token=":                  "token=abc",
		"access_token=":           "retry with access_token=abc123",
		"secret:":                 "secret:abc",
		"client_secret=":          "client_secret=abc",
		"api_key=":                "api_key=abc",
		"apikey:":                 "apikey: abc",
		"pwd=":                    "pwd=x",
	}
	for name, reason := range refused {
		t.Run("refused/"+name, func(t *testing.T) {
			assert.False(t, SafeReason(reason), "%q", reason)
			err := Request{Action: ActionDrain, ID: "m", Cluster: "worker-a", Reason: reason}.Validate()
			assert.ErrorIs(t, err, ErrReason)
		})
	}
	for _, reason := range []string{
		"planned maintenance — rack 7",
		"planned maintenance",
		"kernel upgrade, see OPS-1234",
		"token bucket tuning",             // token, but no assignment
		"password rotation window",        // password, but no assignment
		"secret santa party: rack 7 down", // "party:" is not a secret name
		"ghp_short",                       // too short to be a token
		"AKIA is a prefix; AKIAIOSFODNN7EXAMPLEX is 21 chars",
		"xox-nothing",
		"ask-" + strings.Repeat("x", 20), // not a word boundary before sk-
		"scale down: 50% (ratio 1:2)",
		"ticket=OPS-7",
	} {
		t.Run("allowed/"+reason, func(t *testing.T) {
			assert.True(t, SafeReason(reason), "%q", reason)
		})
	}
}
