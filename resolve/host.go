package resolve

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

const (
	// MaxHostLen is the longest hostname accepted, without the trailing dot.
	MaxHostLen = 253
	// MaxHosts is the most hosts a [Cache] knows at once.
	MaxHosts = 65536
	// MaxAddrs is the most addresses kept for one host (the lowest, in sort order);
	// it is also the EndpointSlice endpoint limit.
	MaxAddrs = 1000
	maxLabel = 63
)

var (
	// ErrInvalidHost is wrapped by the error for a hostname that is not a valid DNS name.
	ErrInvalidHost = errors.New("invalid hostname")
	// ErrTooManyHosts is wrapped by the error for a new host when [MaxHosts] are known.
	ErrTooManyHosts = errors.New("too many hosts")
	// ErrNoAddresses is the failure recorded for a lookup that returned no address.
	ErrNoAddresses = errors.New("no addresses")
	errCanceled    = errors.New("lookup canceled before it finished")
)

// literal reports whether host is an IP literal and returns it unmapped; a zone
// is an error (an endpoint address has none).
func literal(host string) (netip.Addr, bool, error) {
	if len(host) > MaxHostLen+1 {
		return netip.Addr{}, false, nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false, nil
	}
	if a.Zone() != "" {
		return netip.Addr{}, true, fmt.Errorf("%w %.64q: an IP address with a zone", ErrInvalidHost, host)
	}
	return a.Unmap(), true, nil
}

// canonical validates host and returns it lowercase without the trailing dot.
func canonical(host string) (string, error) {
	h := strings.TrimSuffix(host, ".")
	if h == "" || len(h) > MaxHostLen {
		return "", fmt.Errorf("%w %.64q: length %d not in 1..%d", ErrInvalidHost, host, len(h), MaxHostLen)
	}
	for label := range strings.SplitSeq(h, ".") {
		if err := checkLabel(label); err != nil {
			return "", fmt.Errorf("%w %.64q: %w", ErrInvalidHost, host, err)
		}
	}
	return strings.ToLower(h), nil
}

func checkLabel(label string) error {
	if label == "" || len(label) > maxLabel {
		return fmt.Errorf("label length %d not in 1..%d", len(label), maxLabel)
	}
	if label[0] == '-' || label[len(label)-1] == '-' {
		return errors.New("label starts or ends with '-'")
	}
	for i := range len(label) {
		c := label[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("character %q not allowed", c)
		}
	}
	return nil
}

// normalize returns addrs unmapped, without zones or invalid addresses, sorted,
// deduplicated and at most [MaxAddrs] long, in a new slice.
func normalize(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			out = append(out, a.Unmap().WithZone(""))
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	out = slices.Compact(out)
	if len(out) > MaxAddrs {
		out = out[:MaxAddrs]
	}
	return slices.Clip(out)
}
