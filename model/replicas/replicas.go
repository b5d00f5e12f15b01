// Package replicas lets every replica of a publisher tell the leader what its own xDS
// clients have confirmed, with Kubernetes as the shared state and nothing else: each
// replica owns one Lease (its report), renewed like a leader-election Lease, whose
// annotation lists the maps it has not seen confirmed (Published not True) and serves
// content for, with what its clients did with them. The leader reads every replica's
// report from an informer and counts a replica only while its report is renewed (lease.Board
// in publish/lease), so a dead replica stops counting once its report expires and nothing
// waits on it for longer. A replica that cannot renew its report fences itself before it
// could expire (lease.Writer's Fence): it closes its xDS connections and refuses streams, so
// its clients move to replicas that count, and it serves again once a renewal lands. This
// package is the report format and its judgement, pure; publish/lease exchanges the Leases.
//
// The report does not grow with the number of maps in steady state: a map enters it while
// its Published condition is not True, and leaves once it is. Content versions are
// digests (xds.Service.Digest), so every replica names the same content the same way; a
// replica whose digest differs from the leader's has not caught up with the inputs yet.
// A report is bounded in bytes (MaxEncoded, Encode): what does not fit is left out
// namespace by namespace in turn, and a map left out is held, never released (Judge).
package replicas

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/trafficmap/publisher/model/untrusted"
)

// Annotation holds a report on its Lease: the JSON of Report, gzip-compressed and
// base64-encoded, at most MaxEncoded bytes.
const Annotation = "publisher.trafficmap.dev/xds-report"

// LabelFor labels a report Lease with the name of the election Lease its replica takes part
// in; the Board lists the reports of one election by it.
const LabelFor = "publisher.trafficmap.dev/report-for"

// MaxEncoded bounds an encoded report (the annotation value): Kubernetes limits all of an
// object's annotations together to 256 KiB, and the rest is left for the key and others.
const MaxEncoded = 192 << 10

// Bounds of the fields a report copies from client-chosen strings (node ids, stream names,
// NACK text) and of what it lists; longer strings are cut (ending in "…").
const (
	// MaxWaiting bounds the stream names listed per map.
	MaxWaiting = 8
	// MaxField bounds a stream name, a NACK's client, version and type, and a digest.
	MaxField = untrusted.MaxID
	// MaxMessage bounds a NACK message.
	MaxMessage = untrusted.MaxMessage
	// MaxKey bounds a map key (a namespace is at most 63 bytes, a name 253); a map whose
	// key is longer is left out (and so held, see Judge).
	MaxKey = 320
	// MaxTruncated bounds the namespaces Report.Truncated names.
	MaxTruncated = 64
	// MaxArrived bounds the clients Report.Arrived names: the newest arrivals are kept.
	MaxArrived = 256
)

// Report is what one replica's xDS clients did with the maps not yet Published.
type Report struct {
	// Identity is the replica's leader-election identity.
	Identity string `json:"identity"`
	// Seq is set by the Writer and increases with every write of the report Lease, so a
	// report is never taken for an older one with the same content (see Board).
	Seq uint64 `json:"seq,omitempty"`
	// Clients is how many client streams are connected to the replica.
	Clients int `json:"clients"`
	// Maps are the maps whose Published condition the replica saw not True and for which
	// it serves content, sorted by key: those whose relevant clients all ACKed it (the
	// positive evidence the leader needs that this replica serves the same content and
	// nothing waits on it here), and those some client still waits on (not ACKed, or
	// NACKed). A map it serves nothing for (its plan fails there, for example a missing
	// service) is not listed: nothing of it can wait on this replica's clients, and the
	// leader, whose content it would be, holds a map absent from a report (see Judge).
	Maps []Map `json:"maps,omitempty"`
	// Truncated names the namespaces, sorted, of which maps (or their detail, see
	// Map.Trimmed) were left out to keep the report within MaxEncoded; at most MaxTruncated.
	// A map left out is held, as any map absent from a report; the space is shared out
	// namespace by namespace (see Encode), so one namespace's count never leaves out another's
	// maps before its own.
	Truncated []string `json:"truncated,omitempty"`
	// Overflow says that maps of more namespaces were left out than Truncated names.
	Overflow bool `json:"overflow,omitempty"`
	// Arrived names, by ClientTag, sorted, the clients connected to the replica whose
	// stream identified itself within --xds-departed-grace: at most MaxArrived, the newest.
	// A client that left another replica and came back here is counted by this report from
	// then on, so that replica's departed stream of it holds nothing any more (as when a
	// client returns to the replica it left). Left out when the report does not fit
	// MaxEncoded: the departed streams then hold until their grace ends, as before.
	Arrived []string `json:"arrived,omitempty"`
	// Silent is set by the reader (lease.Board), never encoded: the report stopped being
	// renewed, yet still counts because the replica's clients may hold what it served.
	Silent *Silent `json:"-"`
}

// Silent describes a report that expired (its replica stopped renewing it: frozen, hung or
// cut off from the API server) and is still counted. A replica that cannot renew fences
// itself (closes its clients' connections) only while it runs; one that is frozen cannot,
// and its clients keep what it served until they notice (a keepalive timeout) or it
// resumes. So the leader judges by the last report, as for a live one, until Until.
type Silent struct {
	// Since is when the report expired; Until is when it stops counting.
	Since, Until time.Time
}

// Map is one map in a Report.
type Map struct {
	// Key is the map's namespace/name.
	Key string `json:"key"`
	// Digest is the content the replica serves for the map (xds.Service.Digest); "" when
	// it serves none (reports of older replicas list such maps).
	Digest string `json:"digest"`
	// Relevant and Acked count the replica's client streams subscribed to the map's
	// resources and those that ACKed its content.
	Relevant int `json:"relevant"`
	Acked    int `json:"acked"`
	// Waiting names up to MaxWaiting relevant streams that have not ACKed.
	Waiting []string `json:"waiting,omitempty"`
	// Nack is a relevant stream's rejection of the content, nil when none.
	Nack *Nack `json:"nack,omitempty"`
	// Departed names up to MaxWaiting departed streams past --xds-departed-grace that left
	// without confirming the content: they are not counted (no hold), only named, so the
	// leader's message says who may still route by older weights.
	Departed []string `json:"departed,omitempty"`
	// Trimmed says that Waiting, Departed and the NACK's client and message were left out
	// to keep the report within MaxEncoded.
	Trimmed bool `json:"trimmed,omitempty"`
}

// waits reports whether a client of the replica waits on the map's content.
func (m Map) waits() bool { return m.Acked < m.Relevant || m.Nack != nil }

// Nack is a client's rejection of a version carrying a map's content.
type Nack struct {
	Client  string `json:"client"`
	Version string `json:"version"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Encode returns the annotation value of r, at most MaxEncoded bytes. Client-chosen strings
// are cut to their bounds (MaxField, MaxMessage) and Maps sorted by key first. When the
// whole report does not fit, it keeps what fits of Maps, namespace by namespace in turn
// (sorted namespaces, each one's maps in key order, maps no client waits on first): first
// each namespace's maps without their detail (Waiting, Departed, the NACK's client and message:
// Trimmed), then their detail. The namespaces with anything left out are named in Truncated.
// Leaving a map out never releases it (the leader holds a map absent from a report that is
// not Published), and a namespace with fewer maps than its share keeps them all whatever
// the others hold. Encode is deterministic.
func Encode(r Report) (string, error) {
	r = sanitize(r)
	raw, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	// JSON this large is a report far beyond its bound (reports compress about 3 to 10
	// times): the fit starts from a guess instead of compressing it all, and so never
	// tries keeping every map (at worst one is left out that would have fit: held, as
	// any map left out).
	ratio := 0.3
	if len(raw) <= 32*MaxEncoded {
		v, err := compress(raw)
		if err != nil || len(v) <= MaxEncoded {
			return v, err
		}
		ratio = float64(len(v)) / float64(len(raw))
	}
	return fit(r, ratio)
}

func encode(r Report) (string, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	return compress(raw)
}

// compress is the annotation value of a report's JSON.
func compress(raw []byte) (string, error) {
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

// cut returns s, its invalid UTF-8 replaced by U+FFFD (as JSON encodes it), cut to at most
// n bytes at a rune boundary, ending in "…" when cut.
func cut(s string, n int) string { return untrusted.Cut(strings.ToValidUTF8(s, "\uFFFD"), n) }

// sanitize returns a copy of r with its maps sorted by key, its strings within their
// bounds, and a map whose key exceeds MaxKey left out (its namespace named in Truncated).
func sanitize(r Report) Report {
	out := r
	out.Maps = make([]Map, 0, len(r.Maps))
	out.Truncated = make([]string, 0, len(r.Truncated))
	for _, ns := range r.Truncated {
		out.Truncated = append(out.Truncated, cut(ns, MaxField))
	}
	for _, m := range r.Maps {
		m.Key = strings.ToValidUTF8(m.Key, "\uFFFD")
		if len(m.Key) > MaxKey {
			out.Truncated = append(out.Truncated, cut(namespace(m.Key), MaxField))
			continue
		}
		m.Digest = cut(m.Digest, MaxField)
		m.Waiting = boundNames(m.Waiting)
		m.Departed = boundNames(m.Departed)
		if m.Nack != nil {
			m.Nack = &Nack{Client: cut(m.Nack.Client, MaxField), Version: cut(m.Nack.Version, MaxField),
				Type: cut(m.Nack.Type, MaxField), Message: cut(m.Nack.Message, MaxMessage)}
		}
		out.Maps = append(out.Maps, m)
	}
	slices.SortStableFunc(out.Maps, func(a, b Map) int { return strings.Compare(a.Key, b.Key) })
	out.Truncated, out.Overflow = boundNamespaces(out.Truncated, out.Overflow)
	out.Arrived = boundTags(r.Arrived)
	return out
}

// boundTags is the first MaxArrived distinct ClientTags of tags (anything else left out),
// sorted; nil when none.
func boundTags(tags []string) []string {
	out := make([]string, 0, min(len(tags), MaxArrived))
	seen := make(map[string]bool, cap(out))
	for _, t := range tags {
		if len(out) == MaxArrived {
			break
		}
		if isTag(t) && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// isTag reports whether t is shaped as a ClientTag.
func isTag(t string) bool {
	if len(t) != tagLen {
		return false
	}
	_, err := hex.DecodeString(t)
	return err == nil && strings.ToLower(t) == t
}

// boundNames is at most MaxWaiting of names, each cut to MaxField; nil when none.
func boundNames(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(names), MaxWaiting))
	for _, id := range names[:min(len(names), MaxWaiting)] {
		out = append(out, cut(id, MaxField))
	}
	return out
}

// boundNamespaces sorts and dedupes namespaces and keeps at most MaxTruncated of them
// (overflow set when some are left out).
func boundNamespaces(ns []string, overflow bool) ([]string, bool) {
	slices.Sort(ns)
	ns = slices.Compact(ns)
	if len(ns) > MaxTruncated {
		ns, overflow = ns[:MaxTruncated], true
	}
	if len(ns) == 0 {
		ns = nil
	}
	return ns, overflow
}

// namespace is the namespace of a map key.
func namespace(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	return ns
}

// trimmed is m without its detail.
func trimmed(m Map) Map {
	if len(m.Waiting) == 0 && len(m.Departed) == 0 && m.Nack == nil {
		return m
	}
	t := Map{Key: m.Key, Digest: m.Digest, Relevant: m.Relevant, Acked: m.Acked, Trimmed: true}
	if m.Nack != nil {
		t.Nack = &Nack{Version: m.Nack.Version, Type: m.Nack.Type}
	}
	return t
}

// fit is r (sanitized; its JSON compresses about ratio times) with as much of Maps as
// fits MaxEncoded: see Encode. It keeps the first k items of fitOrder for the largest k
// that fits, nearly (see largestFitting).
func fit(r Report, ratio float64) (string, error) {
	r.Arrived = nil // see Report.Arrived
	order := fitOrder(r)
	best, ok, err := largestFitting(itemSizes(r, order), ratio, func(k int) (string, bool, error) {
		v, err := encode(withItems(r, order, k))
		return v, err == nil && len(v) <= MaxEncoded, err
	})
	if err != nil {
		return "", err
	}
	if !ok { // not even the namespaces fit: say that maps are left out
		return encode(Report{Identity: r.Identity, Seq: r.Seq, Clients: r.Clients, Overflow: true})
	}
	return best, nil
}

// fitItem is one thing fit keeps or leaves out: a map without its detail, or a map's
// detail.
type fitItem struct {
	i      int  // index in r.Maps
	detail bool // the map's detail, not the map
}

// fitOrder is the order in which fit keeps r's maps: namespace by namespace in turn (one
// item of each namespace per round), each namespace's maps first without detail (those no
// client waits on first), then the detail of those that have some.
func fitOrder(r Report) []fitItem {
	byNS := map[string][]int{}
	for i, m := range r.Maps {
		ns := namespace(m.Key)
		byNS[ns] = append(byNS[ns], i)
	}
	names := slices.Sorted(maps.Keys(byNS))
	seqs := make([][]fitItem, len(names))
	for n, ns := range names {
		idx := byNS[ns]
		slices.SortStableFunc(idx, func(a, b int) int { // no client waits on it first
			wa, wb := r.Maps[a].waits(), r.Maps[b].waits()
			switch {
			case wa == wb:
				return 0
			case !wa:
				return -1
			default:
				return 1
			}
		})
		for _, i := range idx {
			seqs[n] = append(seqs[n], fitItem{i: i})
		}
		for _, i := range idx {
			if len(r.Maps[i].Waiting) > 0 || len(r.Maps[i].Departed) > 0 || r.Maps[i].Nack != nil {
				seqs[n] = append(seqs[n], fitItem{i: i, detail: true})
			}
		}
	}
	var order []fitItem
	for round := 0; ; round++ {
		more := false
		for _, seq := range seqs {
			if round < len(seq) {
				more = true
				order = append(order, seq[round])
			}
		}
		if !more {
			return order
		}
	}
}

// withItems is r keeping the first k items of order: a map not kept, or kept without its
// detail, names its namespace in Truncated.
func withItems(r Report, order []fitItem, k int) Report {
	kept := make([]bool, len(r.Maps))
	full := make([]bool, len(r.Maps))
	for _, it := range order[:k] {
		if it.detail {
			full[it.i] = true
		} else {
			kept[it.i] = true
		}
	}
	out := Report{Identity: r.Identity, Seq: r.Seq, Clients: r.Clients, Truncated: slices.Clone(r.Truncated), Overflow: r.Overflow}
	for i, m := range r.Maps {
		switch {
		case !kept[i]:
			out.Truncated = append(out.Truncated, namespace(m.Key))
		case full[i]:
			out.Maps = append(out.Maps, m)
		default:
			t := trimmed(m)
			if t.Trimmed {
				out.Truncated = append(out.Truncated, namespace(m.Key))
			}
			out.Maps = append(out.Maps, t)
		}
	}
	out.Truncated, out.Overflow = boundNamespaces(out.Truncated, out.Overflow)
	return out
}

// itemSizes returns the cumulative JSON bytes of order's items: element k is the bytes of
// the first k items.
func itemSizes(r Report, order []fitItem) []int {
	cum := make([]int, len(order)+1)
	for j, it := range order {
		size := jsonSize(trimmed(r.Maps[it.i]))
		if it.detail {
			size = jsonSize(r.Maps[it.i]) - size
		}
		cum[j+1] = cum[j] + size
	}
	return cum
}

// largestFitting returns the encoding try makes of the largest k (items kept) that fits,
// nearly, and false when not even k = 0 fits. cum are the items' cumulative JSON sizes (see
// itemSizes), ratio how many times the JSON compresses. The search starts from the size the
// compression ratio predicts and stops within 1/64 of the answer, so a report that does not
// fit costs a handful of encodings, not one per halving of every map.
func largestFitting(cum []int, ratio float64, try func(k int) (string, bool, error)) (string, bool, error) {
	upTo := func(raw float64) int { // the largest k whose items take at most raw bytes
		k, _ := slices.BinarySearch(cum, int(raw)+1)
		return max(k-1, 0)
	}
	lo, hi := -1, len(cum)-1 // lo fits, hi does not
	var best string
	for k := min(upTo(0.9*MaxEncoded/ratio), hi-1); ; {
		v, fits, err := try(k)
		if err != nil {
			return "", false, err
		}
		if fits {
			lo, best = k, v
			break
		}
		hi = k
		if k == 0 {
			return "", false, nil
		}
		k = min(upTo(0.7*float64(cum[k])), k-1)
	}
	for { // up by 15% at a time while that fits
		k := max(upTo(1.15*float64(cum[lo])), lo+1)
		if k >= hi {
			break
		}
		v, fits, err := try(k)
		if err != nil {
			return "", false, err
		}
		if !fits {
			hi = k
			break
		}
		lo, best = k, v
	}
	for hi-lo > max(1, hi/64) {
		mid := lo + (hi-lo)/2
		v, fits, err := try(mid)
		if err != nil {
			return "", false, err
		}
		if fits {
			lo, best = mid, v
		} else {
			hi = mid
		}
	}
	return best, true, nil
}

// jsonSize is the size of m's JSON.
func jsonSize(m Map) int {
	raw, _ := json.Marshal(m) // a Map always marshals
	return len(raw)
}

// maxDecoded bounds a decoded report (a corrupt or hostile annotation cannot blow up the
// leader's memory).
const maxDecoded = 8 << 20

// ErrNegativeCount marks a decoded report with a negative client count: no replica writes
// one, and a map counted with one could look ACKed.
var ErrNegativeCount = errors.New("negative client count")

// Decode parses an annotation value written by Encode. What it returns is bounded as Encode
// bounds it, whatever the value holds: strings cut to MaxField and MaxMessage, at most
// MaxWaiting streams per map, at most MaxTruncated namespaces, maps with a key over MaxKey
// left out (their namespace named in Truncated), and maps sorted by key. A report with a
// negative count, or whose JSON does not parse or exceeds 8 MiB decompressed, is an error.
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
	for _, m := range r.Maps {
		if m.Relevant < 0 || m.Acked < 0 {
			return Report{}, fmt.Errorf("parse report: map %q: %w", cut(m.Key, MaxField), ErrNegativeCount)
		}
	}
	if r.Clients < 0 {
		return Report{}, fmt.Errorf("parse report: %w", ErrNegativeCount)
	}
	return sanitize(r), nil
}

// tagLen is the length of a ClientTag: 96 bits of SHA-256, so that no client can choose a
// node id whose tag is another client's.
const tagLen = 24

// ClientTag names an xDS client in a report (Report.Arrived): its certificate identity and
// node id, hashed, so a report names every client in a few bytes and never copies the
// client-chosen node id. Tags of the same client are equal on every replica.
func ClientTag(identity, node string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s%s", len(identity), identity, node))
	return hex.EncodeToString(sum[:])[:tagLen]
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
	// Message says what is missing, replica by replica ("" when Done with nothing to say),
	// and names the departed streams past their grace that the reports list (Map.Departed).
	Message string
}

// maxMessage bounds Verdict.Message (it goes into a condition message).
const maxMessage = 4096

// Judge is the verdict of peers (the other replicas' counted reports: live, or Silent
// within the leader's peer grace, judged alike) on the map key whose
// content is digest. published says that the map's Published condition is True at its
// generation. A peer releases the map only on positive evidence: its report lists the map
// at digest with every relevant client ACKed and no NACK. A map absent from a peer's report
// is held while it is not Published: the peer serves nothing for it (it has not caught up
// with the inputs), its report is behind, or the map was left out to keep the report
// within its size (Truncated, Overflow) - never taken as nothing to wait for. A published
// map absent from a report is not held: a replica lists only maps it sees not True. It is
// pure.
func Judge(peers []Report, key, digest string, published bool) Verdict {
	v := Verdict{Done: true}
	var waits, departed []string
	for _, p := range slices.SortedFunc(slices.Values(peers), func(a, b Report) int { return strings.Compare(a.Identity, b.Identity) }) {
		if w := judgeOne(&v, &departed, p, key, digest, published); w != "" {
			v.Done = false
			waits = append(waits, w+silence(p))
		}
	}
	switch {
	case v.Nack != nil:
		v.Done = false
		client, message := v.Nack.Client, v.Nack.Message
		if client == "" {
			client = "(name left out of the report)"
		}
		if message == "" {
			message = "(message left out of the report)"
		}
		v.Message = fmt.Sprintf("xds client %s of replica %s rejected version %s (%s): %s", client, v.Replica, v.Nack.Version, v.Nack.Type, message)
	case len(waits) > 0:
		v.Message = strings.Join(waits, "; ")
	case len(peers) > 0:
		v.Message = fmt.Sprintf("%d other replicas: %d/%d relevant clients ACKed", len(peers), v.Acked, v.Total)
	}
	if len(departed) > 0 {
		v.Message += fmt.Sprintf("; not counted, past --xds-departed-grace: departed xds client stream(s) of other replicas that left without confirming these weights and may still route by older ones: %s",
			strings.Join(departed, "; "))
	}
	v.Message = cut(v.Message, maxMessage)
	return v
}

// judgeOne adds what peer p says of the map key at digest to v's counts and NACK, and to
// departed the departed streams past their grace it names, and returns why p holds it ("" when
// it does not).
func judgeOne(v *Verdict, departed *[]string, p Report, key, digest string, published bool) string {
	i, found := slices.BinarySearchFunc(p.Maps, key, func(m Map, k string) int { return strings.Compare(m.Key, k) })
	if !found {
		switch {
		case published:
			return ""
		case slices.Contains(p.Truncated, namespace(key)) || p.Overflow:
			return fmt.Sprintf("replica %s left maps of namespace %s out of its report to keep it within %d bytes (held until listed)", p.Identity, namespace(key), MaxEncoded)
		default:
			return fmt.Sprintf("replica %s has not reported on it yet", p.Identity)
		}
	}
	m := p.Maps[i]
	if m.Nack != nil && v.Nack == nil && m.Digest == digest {
		v.Nack, v.Replica = m.Nack, p.Identity
	}
	if m.Digest != digest {
		return fmt.Sprintf("replica %s does not serve this content yet", p.Identity)
	}
	v.Acked += m.Acked
	v.Total += m.Relevant
	if len(m.Departed) > 0 {
		*departed = append(*departed, fmt.Sprintf("replica %s: %s", p.Identity, strings.Join(m.Departed, ", ")))
	}
	if m.Acked >= m.Relevant {
		return ""
	}
	w := fmt.Sprintf("replica %s: %d/%d relevant clients ACKed", p.Identity, m.Acked, m.Relevant)
	if len(m.Waiting) > 0 {
		w += ", waiting for " + strings.Join(m.Waiting, ", ")
	}
	return w
}

// silence says why a silent report still counts ("" for a live one).
func silence(p Report) string {
	if p.Silent == nil {
		return ""
	}
	return fmt.Sprintf(" (its report expired at %s, not renewed: frozen or cut off; its %d clients may still hold what it served, so it counts until %s, --xds-peer-grace)",
		p.Silent.Since.UTC().Format(time.RFC3339), p.Clients, p.Silent.Until.UTC().Format(time.RFC3339))
}

// Replica is one replica as the Board sees it.
type Replica struct {
	Identity string `json:"identity"`
	// Self marks this replica.
	Self bool `json:"self,omitempty"`
	// Live: the report was renewed within its duration.
	Live bool `json:"live"`
	// Counted: the report counts for the leader (live, or silent within the peer grace:
	// see Silent).
	Counted bool `json:"counted"`
	// Clients is how many client streams are connected to it.
	Clients int `json:"clients"`
	// Unconfirmed counts the maps its report lists (Overflow: maps were left out to keep it
	// within MaxEncoded, of the namespaces Truncated names and maybe more).
	Unconfirmed int      `json:"unconfirmed"`
	Overflow    bool     `json:"overflow,omitempty"`
	Truncated   []string `json:"truncated,omitempty"`
	// Seq is the report's sequence number.
	Seq uint64 `json:"seq,omitempty"`
	// Renewed is when this process last saw the report change.
	Renewed time.Time `json:"renewed"`
}

// String describes a replica for logs.
func (r Replica) String() string {
	return fmt.Sprintf("%s (live %t, %d clients)", r.Identity, r.Live, r.Clients)
}
