package weights

import (
	"errors"
	"strconv"
	"strings"
)

// TrafficMap field names used in [EntryError.Field].
const (
	fieldCluster  = "cluster"
	fieldWeight   = "weight"
	fieldEndpoint = "endpoint"
)

var (
	// ErrClusterInvalid reports an entry cluster that is empty or not a lowercase
	// DNS-1123 subdomain.
	ErrClusterInvalid = errors.New("must be a lowercase DNS-1123 subdomain")

	// ErrDuplicateCluster reports a cluster used by more than one entry; it is
	// reported on the later occurrence and names the first one.
	ErrDuplicateCluster = errors.New("must be unique across entries")

	// ErrWeightRange reports an entry weight outside 0..MaxWeight.
	ErrWeightRange = errors.New("must be between 0 and " + strconv.Itoa(MaxWeight))

	// ErrEndpointInvalid reports an entry endpoint that is not an absolute http or
	// https URL made only of a scheme, a host and an optional port.
	ErrEndpointInvalid = errors.New("must be an absolute http or https URL")
)

// EntryError is one validation problem with one TrafficMap entry. Err is one of the
// package sentinels, possibly wrapped with detail, so errors.Is works through it.
type EntryError struct {
	Index   int    // index in Input.Entries
	Cluster string // the entry's cluster as given (possibly invalid)
	Field   string // "cluster", "weight" or "endpoint": the TrafficMap field name
	Err     error  // a sentinel, possibly wrapped via fmt.Errorf("%w: ...")

	// value is the offending field value, already formatted for the message
	// (quoted strings, plain numbers, credentials redacted); empty when unset.
	value string
}

// Error formats the problem as `spec.entries[i] (cluster "c"): field value: rule`.
func (e *EntryError) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString("spec.entries[")
	b.WriteString(strconv.Itoa(e.Index))
	b.WriteString("] (cluster ")
	b.WriteString(strconv.Quote(e.Cluster))
	b.WriteString("): ")
	b.WriteString(e.Field)
	if e.value != "" {
		b.WriteByte(' ')
		b.WriteString(e.value)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("invalid")
	}
	return b.String()
}

// Unwrap returns Err so errors.Is and errors.As see the sentinel.
func (e *EntryError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}
