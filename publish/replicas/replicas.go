// Package replicas lets every replica of a publisher tell the leader what its own xDS
// clients have confirmed, with Kubernetes as the shared state and nothing else: each
// replica owns one Lease (its report), renewed like a leader-election Lease, whose
// annotation lists the maps it has not seen confirmed (Published not True) with what its
// clients did with them. The leader reads every replica's report from an informer and
// counts a replica only while its report is renewed (Board), so a dead replica stops
// counting once its report expires and nothing waits on it for longer.
//
// The report does not grow with the number of maps in steady state: a map enters it while
// its Published condition is not True, and leaves once it is. Content versions are
// digests (xds.Service.Digest), so every replica names the same content the same way; a
// replica whose digest differs from the leader's has not caught up with the inputs yet.
package replicas

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Annotation holds a report on its Lease: the JSON of Report, gzip-compressed and
// base64-encoded.
const Annotation = "publisher.trafficmap.dev/xds-report"

// LabelFor labels a report Lease with the name of the election Lease its replica takes part
// in; the Board lists the reports of one election by it.
const LabelFor = "publisher.trafficmap.dev/report-for"

// MaxMaps bounds the maps one report lists (a cold start of many new maps); the rest are
// summed up by Report.Overflow.
const MaxMaps = 2000

// MaxWaiting bounds the stream names listed per map.
const MaxWaiting = 8

// Report is what one replica's xDS clients did with the maps not yet Published.
type Report struct {
	// Identity is the replica's leader-election identity.
	Identity string `json:"identity"`
	// Clients is how many client streams are connected to the replica.
	Clients int `json:"clients"`
	// Maps are the maps whose Published condition the replica saw not True, sorted by key,
	// at most MaxMaps.
	Maps []Map `json:"maps,omitempty"`
	// Overflow says that more maps were not confirmed than Maps lists.
	Overflow bool `json:"overflow,omitempty"`
}

// Map is one map in a Report.
type Map struct {
	// Key is the map's namespace/name.
	Key string `json:"key"`
	// Digest is the content the replica serves for the map (xds.Service.Digest); "" when
	// it serves none (not built yet, or its resources fail validation there).
	Digest string `json:"digest"`
	// Relevant and Acked count the replica's client streams subscribed to the map's
	// resources and those that ACKed its content.
	Relevant int `json:"relevant"`
	Acked    int `json:"acked"`
	// Waiting names up to MaxWaiting relevant streams that have not ACKed.
	Waiting []string `json:"waiting,omitempty"`
	// Nack is a relevant stream's rejection of the content, nil when none.
	Nack *Nack `json:"nack,omitempty"`
}

// Nack is a client's rejection of a version carrying a map's content.
type Nack struct {
	Client  string `json:"client"`
	Version string `json:"version"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Encode returns the annotation value of r.
func Encode(r Report) (string, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		return "", fmt.Errorf("compress report: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("compress report: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// maxDecoded bounds a decoded report (a corrupt or hostile annotation cannot blow up the
// leader's memory).
const maxDecoded = 8 << 20

// Decode parses an annotation value written by Encode.
func Decode(value string) (Report, error) {
	var r Report
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		return r, fmt.Errorf("decode report: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return r, fmt.Errorf("decompress report: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return r, fmt.Errorf("decompress report: %w", err)
	}
	if len(data) > maxDecoded {
		return r, fmt.Errorf("decompress report: larger than %d bytes", maxDecoded)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("parse report: %w", err)
	}
	return r, nil
}

// LeaseName is the name of the report Lease of the replica identity taking part in the
// election of the Lease named election: bounded, a valid name, distinct per identity.
func LeaseName(election, identity string) string {
	sum := sha256.Sum256([]byte(identity))
	name := election
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.TrimRight(name, "-.") + "-xds-" + hex.EncodeToString(sum[:6])
}

// Verdict is what the other replicas' reports say about one map's content.
type Verdict struct {
	// Done: every live replica's relevant clients ACKed the content (or it has none).
	Done bool
	// Acked and Total count the relevant client streams of the other replicas.
	Acked, Total int
	// Nack is the first rejection, with Replica naming where; nil when none.
	Nack    *Nack
	Replica string
	// Message says what is missing, replica by replica ("" when Done with nothing to say).
	Message string
}

// Judge is the verdict of peers (the other replicas' live reports) on the map key whose
// content is digest. published says that the map's Published condition is True at its
// generation: a replica lists only maps it saw not True, so a map absent from its report is
// unconfirmed there only while the condition is not True (its report is then behind). It
// is pure.
func Judge(peers []Report, key, digest string, published bool) Verdict {
	v := Verdict{Done: true}
	var waits []string
	for _, p := range slices.SortedFunc(slices.Values(peers), func(a, b Report) int { return strings.Compare(a.Identity, b.Identity) }) {
		i, found := slices.BinarySearchFunc(p.Maps, key, func(m Map, k string) int { return strings.Compare(m.Key, k) })
		if !found {
			switch {
			case published:
			case p.Overflow:
				v.Done = false
				waits = append(waits, fmt.Sprintf("replica %s lists more unconfirmed maps than its report holds", p.Identity))
			default:
				v.Done = false
				waits = append(waits, fmt.Sprintf("replica %s has not reported on it yet", p.Identity))
			}
			continue
		}
		m := p.Maps[i]
		if m.Nack != nil && v.Nack == nil && m.Digest == digest {
			v.Nack, v.Replica = m.Nack, p.Identity
		}
		if m.Digest != digest {
			v.Done = false
			waits = append(waits, fmt.Sprintf("replica %s does not serve this content yet", p.Identity))
			continue
		}
		v.Acked += m.Acked
		v.Total += m.Relevant
		if m.Acked < m.Relevant {
			v.Done = false
			w := fmt.Sprintf("replica %s: %d/%d relevant clients ACKed", p.Identity, m.Acked, m.Relevant)
			if len(m.Waiting) > 0 {
				w += ", waiting for " + strings.Join(m.Waiting, ", ")
			}
			waits = append(waits, w)
		}
	}
	switch {
	case v.Nack != nil:
		v.Done = false
		v.Message = fmt.Sprintf("xds client %s of replica %s rejected version %s (%s): %s", v.Nack.Client, v.Replica, v.Nack.Version, v.Nack.Type, v.Nack.Message)
	case len(waits) > 0:
		v.Message = strings.Join(waits, "; ")
	case len(peers) > 0:
		v.Message = fmt.Sprintf("%d other replicas: %d/%d relevant clients ACKed", len(peers), v.Acked, v.Total)
	}
	return v
}
