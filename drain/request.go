package drain

import (
	"errors"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Action is drain or undrain.
type Action string

// The two actions.
const (
	ActionDrain   Action = "drain"
	ActionUndrain Action = "undrain"
)

// Title is the action as the preview and the result name it: "traffic drain".
func (a Action) Title() string { return "traffic " + string(a) }

// DryRun says how far the action goes.
type DryRun string

// Dry-run modes.
const (
	DryRunNone   DryRun = "none"   // patch and store
	DryRunClient DryRun = "client" // read, validate, preview and confirm; send no patch
	DryRunServer DryRun = "server" // send the patch with dryRun=All; nothing is stored
)

// Refusals and failures, with OME's messages. Each is returned as is (never wrapped with more
// text), so the command prints exactly "error: <message>".
var (
	ErrArgs             = errors.New("exactly one inference service is required")
	ErrOutput           = errors.New("output must be table, wide, json or yaml")
	ErrDryRun           = errors.New("dry-run must be none, client or server")
	ErrName             = errors.New("invalid inference service name")
	ErrWorkloadCluster  = errors.New("traffic drain requires --workload-cluster; --cluster selects the Kubernetes API cluster")
	ErrAction           = errors.New("traffic action must be drain or undrain")
	ErrID               = errors.New("traffic override ID must be a DNS-1123 label")
	ErrUndrainOnlyID    = errors.New("traffic undrain accepts only an override ID")
	ErrCluster          = errors.New("traffic drain cluster must be a DNS-1123 subdomain")
	ErrReason           = errors.New("traffic drain reason must be bounded, trimmed, printable, and non-secret")
	ErrNamespace        = errors.New("resolved workload namespace is invalid")
	ErrContext          = errors.New("selected kubeconfig context is unavailable or unsafe")
	ErrBounds           = errors.New("traffic action refused: traffic-drain state exceeds safety bounds")
	ErrDerived          = errors.New("action refused: placement sources and derived services cannot be mutated")
	ErrIneligible       = errors.New("traffic action refused: target is not eligible for cross-cluster traffic routing")
	ErrIdentity         = errors.New("action refused: target identity is missing or unsafe")
	ErrDeleting         = errors.New("action refused: target is being deleted")
	ErrUnsafeAnnotation = errors.New("traffic action refused: existing traffic-drain annotation is malformed or unsafe")
	ErrIDExists         = errors.New("traffic drain refused: override ID already exists")
	ErrIDMissing        = errors.New("traffic undrain refused: override ID does not exist")
	ErrNotConfirmed     = errors.New("action not confirmed; noninteractive input requires --yes")
	ErrDeclined         = errors.New("action declined at the prompt; nothing was changed")
	ErrAPI              = errors.New("required Kubernetes API request failed; check access and connectivity")
	ErrTargetMismatch   = errors.New("action target response does not match exact request")
	ErrConflict         = errors.New("guarded annotation patch rejected; refresh traffic status and retry explicitly")
	ErrResponseUnbound  = errors.New("API response is not bound to the request; outcome unknown, check traffic status")
	ErrResponseUnsafe   = errors.New("API response is not safely bound to the request; outcome unknown, check traffic status")
	ErrResponseTooLarge = errors.New("API response exceeds safety bounds; outcome unknown, check traffic status")
	ErrWriteResult      = errors.New("write traffic action result failed; check traffic status")
)

// Bounds, as in OME's pkg/cli/mutate.
const (
	MaxDrains           = 64        // drains in the annotation, before and after
	MaxAnnotationBytes  = 32 * 1024 // annotation value bytes, before and after
	MaxReasonBytes      = 256
	MaxScalarBytes      = 256
	MaxAnnotations      = 256
	MaxLabels           = 256
	MaxFinalizers       = 64
	MaxConditions       = 64
	MaxStatusComponents = 3
	MaxMetadataBytes    = 65536   // projected annotations + labels + finalizers
	MaxPayloadBytes     = 1 << 20 // the object as read, and the patch response
)

var safeScalarChars = regexp.MustCompile(`^[A-Za-z0-9_.:/@+-]+$`)

// credentials are the shapes of secret that a drain reason and every echoed scalar must
// not contain, by name. The first two are OME's pattern (the floor); the others are common
// token shapes. Each matches anywhere in the value unless anchored.
var credentials = []struct {
	name    string
	pattern *regexp.Regexp
}{
	// An OpenAI-style key: sk- and at least 20 of [A-Za-z0-9_-], not preceded by a letter or digit.
	{"sk- key", regexp.MustCompile(`(?:^|[^A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}`)},
	// A JWT-like value: the whole value is three dot-separated parts of at least 16 of [A-Za-z0-9_-].
	{"jwt", regexp.MustCompile(`^[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}$`)},
	// A GitHub token: ghp_, gho_, ghu_, ghs_ or ghr_ and at least 20 letters or digits, or
	// github_pat_ and at least 20 of [A-Za-z0-9_].
	{"github token", regexp.MustCompile(`(?:^|[^A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})`)},
	// An AWS access key ID: AKIA or ASIA and exactly 16 uppercase letters or digits, as a word.
	{"aws access key id", regexp.MustCompile(`(?:^|[^A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?:[^A-Za-z0-9]|$)`)},
	// A Slack token: xoxa-, xoxb-, xoxp-, xoxr- or xoxs- and at least 10 of [A-Za-z0-9-].
	{"slack token", regexp.MustCompile(`(?:^|[^A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}`)},
	// An assignment of a secret, in any case: password, passwd, pwd, secret, token, api_key,
	// api-key or apikey (also as the end of a longer name: access_token, client_secret),
	// then = or :, optional spaces, and a value.
	{"secret assignment", regexp.MustCompile(`(?i)(?:password|passwd|pwd|secret|token|api[_-]?key)\s*[=:]\s*[^\s]`)},
}

// looksLikeCredential reports whether v matches one of the credential shapes.
func looksLikeCredential(v string) bool {
	for _, c := range credentials {
		if c.pattern.MatchString(v) {
			return true
		}
	}
	return false
}

// SafeScalar reports whether v may be echoed and stored: 1 to 256 bytes of
// [A-Za-z0-9_.:/@+-], nothing that looks like a credential (see credentials: OME's sk- key
// and JWT shapes, GitHub, AWS access key, Slack tokens, password=/token=/secret=
// assignments) and no password in a userinfo part.
func SafeScalar(v string) bool {
	if len(v) == 0 || len(v) > MaxScalarBytes || !safeScalarChars.MatchString(v) || looksLikeCredential(v) {
		return false
	}
	if at := strings.LastIndex(v, "@"); at >= 0 {
		userinfo := v[:at]
		if i := strings.LastIndex(userinfo, "//"); i >= 0 {
			userinfo = userinfo[i+2:]
		}
		if strings.Contains(userinfo, ":") {
			return false
		}
	}
	return true
}

// SafeReason reports whether a drain reason is non-empty, at most 256 bytes of valid UTF-8,
// trimmed, free of control, format and line or paragraph separator runes, and free of
// anything that looks like a credential (see credentials). Other Unicode, quotes,
// backslashes and <> are allowed.
func SafeReason(v string) bool {
	if v == "" || len(v) > MaxReasonBytes || !utf8.ValidString(v) || strings.TrimSpace(v) != v || looksLikeCredential(v) {
		return false
	}
	for _, r := range v {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return false
		}
	}
	return true
}

// validID reports whether id is a DNS-1123 label and a safe scalar.
func validID(id string) bool { return len(validation.IsDNS1123Label(id)) == 0 && SafeScalar(id) }

// validCluster reports whether c is a DNS-1123 subdomain and a safe scalar.
func validCluster(c string) bool { return len(validation.IsDNS1123Subdomain(c)) == 0 && SafeScalar(c) }

// ValidName reports whether an InferenceService name is a DNS-1123 subdomain and a safe scalar.
func ValidName(name string) bool { return validCluster(name) }

// Request is what the operator asked for.
type Request struct {
	Action  Action
	ID      string
	Cluster string // drain only
	Reason  string // drain only
}

// Validate checks the request in OME's order and returns the first refusal.
func (r Request) Validate() error {
	if r.Action != ActionDrain && r.Action != ActionUndrain {
		return ErrAction
	}
	if !validID(r.ID) {
		return ErrID
	}
	if r.Action == ActionUndrain {
		if r.Cluster != "" || r.Reason != "" {
			return ErrUndrainOnlyID
		}
		return nil
	}
	if !validCluster(r.Cluster) {
		return ErrCluster
	}
	if !SafeReason(r.Reason) {
		return ErrReason
	}
	return nil
}
