package model

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/trafficmap/publisher/weights"
)

// ContentDigest is the one digest of a map's published content, shared by the pipeline
// (Plan.Digest, recorded in the record ConfigMap) and the xDS sink (xds.Service.Digest,
// exchanged between replicas): the service (spec.service), the hostnames it serves and the
// names it withholds (each sorted, in any input order), and per entry, in order, the
// cluster, endpoint and effective weight. Fields are length-prefixed, so no two contents
// encode the same. It is deterministic and pure: 24 hex digits of sha256.
func ContentDigest(service string, hostnames, withheld []string, entries []weights.EffectiveEntry) string {
	h := sha256.New()
	var buf []byte
	field := func(v string) {
		buf = strconv.AppendInt(buf[:0], int64(len(v)), 10)
		buf = append(buf, ':')
		buf = append(buf, v...)
		h.Write(buf)
	}
	names := func(list []string) {
		sorted := slices.Sorted(slices.Values(list))
		field(strconv.Itoa(len(sorted)))
		for _, n := range sorted {
			field(n)
		}
	}
	field(service)
	names(hostnames)
	names(withheld)
	for _, e := range entries {
		field(e.Cluster)
		field(e.Endpoint.URL)
		field(strconv.FormatInt(int64(e.Effective), 10))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:12])
}
