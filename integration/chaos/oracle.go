package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// The annotations the oracle reads, as the manual (docs/) documents them. They are spelled out
// here rather than imported: the checker's reading of the rules shares no code with the
// publisher's.
const (
	annDrain       = "ome.io/traffic-drain"
	annTolerations = "publisher.trafficmap.dev/tolerations"
	annTaints      = "publisher.trafficmap.dev/taints"
	annRamp        = "publisher.trafficmap.dev/ramp"
	maxWeight      = 1_000_000
	maxBackends    = 16
)

// observed is what the checker saw of one map's inputs at one resourceVersion.
type observed struct {
	Map          *v1beta1.TrafficMap // nil: no map
	ISVC         map[string]string   // the InferenceService's annotations; nil: no InferenceService
	Taints       map[string]string   // WorkloadCluster name -> its taints annotation value (absent: none)
	HostTemplate string              // the publishers' --host-template
	// IPEndpoints: the publishers' backend kind takes endpoints whose host is an IP address
	// (every kind but service-externalname, docs/concepts/published.md RouteRefused).
	IPEndpoints bool
}

// verdict is what Published True may claim for those inputs.
type verdict struct {
	TrueAllowed bool             // false: the publisher must not say True (invalid input, a ramp mid-way, no source ...)
	Weights     map[string]int32 // cluster -> effective weight (every entry, 0 included)
	Hostname    string           // the route hostname
	Why         string           // when !TrueAllowed, the rule (for the lie report)
}

// expect is the checker's own reading of the weight rules (docs/concepts/weights.md,
// docs/reference/commands.md on gradual drains, the reasons in docs/concepts/published.md): the weights and hostname a True Published
// must carry for o, or why True is not allowed at all. The default --no-positive-policy
// (ApplyCurrent) is assumed: all-zero weights are published as they are.
func expect(o observed) verdict {
	if o.Map == nil {
		return refuse("no trafficmap")
	}
	if o.Map.DeletionTimestamp != nil {
		return refuse("the trafficmap is being deleted (Finalizing)")
	}
	if o.ISVC == nil {
		return refuse("no inferenceservice (SourceNotFound)")
	}
	if why := checkEntries(o.Map.Spec.Entries, o.IPEndpoints); why != "" {
		return refuse(why)
	}
	host, why := hostnameOf(o)
	if why != "" {
		return refuse(why)
	}
	holds, why := holdsOf(o)
	if why != "" {
		return refuse(why)
	}
	ramps, err := oracleRamps(o.ISVC)
	if err != nil {
		return refuse("InvalidRampAnnotation: " + err.Error())
	}
	v := verdict{TrueAllowed: true, Weights: map[string]int32{}, Hostname: host}
	for _, e := range o.Map.Spec.Entries {
		h := holds[e.Cluster]
		w := e.Weight
		if h.held() {
			w = 0
		}
		v.Weights[e.Cluster] = w
		if r, ok := ramps[e.Cluster]; ok && r.shapes(e.Weight, w, h) {
			v.TrueAllowed = false
			v.Why = fmt.Sprintf("Ramping: the %s ramp of %s is at step %d of %d", r.Direction, e.Cluster, r.Step, r.Steps)
		}
	}
	return v
}

func refuse(why string) verdict { return verdict{Why: why} }

// canonical renders positive weights as "c1=w1,c2=w2" sorted by cluster ("" when none): the
// probes' format.
func canonical(w map[string]int32) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(w)) {
		if w[c] > 0 {
			parts = append(parts, c+"="+strconv.Itoa(int(w[c])))
		}
	}
	return strings.Join(parts, ",")
}

// checkEntries is InvalidTrafficMap and the entry rules of RouteRefused: "" when the entries
// can be published (ipEndpoints: as observed.IPEndpoints).
func checkEntries(entries []v1beta1.TrafficMapEntry, ipEndpoints bool) string {
	if len(entries) > maxBackends {
		return fmt.Sprintf("RouteRefused: %d entries, more than %d", len(entries), maxBackends)
	}
	seen := map[string]bool{}
	for i, e := range entries {
		if errs := validation.IsDNS1123Subdomain(e.Cluster); len(errs) > 0 {
			return fmt.Sprintf("InvalidTrafficMap: entry %d cluster %q: %s", i, e.Cluster, errs[0])
		}
		if seen[e.Cluster] {
			return fmt.Sprintf("InvalidTrafficMap: duplicate cluster %q", e.Cluster)
		}
		seen[e.Cluster] = true
		if e.Weight < 0 || e.Weight > maxWeight {
			return fmt.Sprintf("InvalidTrafficMap: entry %s weight %d outside 0..%d", e.Cluster, e.Weight, maxWeight)
		}
		if why := checkEndpoint(e.Endpoint, ipEndpoints); why != "" {
			return fmt.Sprintf("entry %s endpoint %q: %s", e.Cluster, e.Endpoint, why)
		}
	}
	return ""
}

// checkEndpoint: an absolute http(s)://host[:port] URL whose host is a DNS name, or also an
// IP address when ipEndpoints.
func checkEndpoint(raw string, ipEndpoints bool) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.User != nil || u.Opaque != "" || u.Hostname() == "":
		return "InvalidTrafficMap: not an absolute http(s)://host[:port] URL"
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return "InvalidTrafficMap: scheme is not http or https"
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || strings.Contains(raw, "#"):
		return "InvalidTrafficMap: not an absolute http(s)://host[:port] URL"
	case !ipEndpoints && net.ParseIP(u.Hostname()) != nil:
		return "RouteRefused: the endpoint host is an IP address"
	}
	return ""
}

// hostnameOf is the route hostname: ome.io/global-host (trimmed), else the template over the
// map's namespace and service. why is set when no sink may publish it.
func hostnameOf(o observed) (host, why string) {
	host = strings.TrimSpace(o.ISVC[v1beta1.AnnotationGlobalHost])
	if host == "" && o.HostTemplate != "" {
		t, err := template.New("host").Option("missingkey=error").Parse(o.HostTemplate)
		if err != nil {
			return "", "RouteRefused: --host-template does not parse"
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, struct{ Namespace, Service string }{o.Map.Namespace, o.Map.Spec.Service}); err != nil {
			return "", "RouteRefused: --host-template does not render"
		}
		host = buf.String()
	}
	if host == "" {
		return "", "RouteRefused: no hostname (no annotation, no --host-template)"
	}
	if net.ParseIP(host) != nil {
		return host, "RouteRefused: the hostname is an IP address"
	}
	if errs := validation.IsDNS1123Subdomain(strings.TrimPrefix(host, "*.")); len(errs) > 0 {
		return host, "RouteRefused: invalid hostname: " + errs[0]
	}
	// A two-label name (or a wildcard over one) is the gRPC name of the namespace it ends
	// in: only that namespace's maps may claim it.
	wildcard := strings.HasPrefix(host, "*.")
	labels := strings.Split(strings.TrimPrefix(host, "*."), ".")
	if grpcForm := (wildcard && len(labels) == 1) || (!wildcard && len(labels) == 2); grpcForm && labels[len(labels)-1] != o.Map.Namespace {
		return host, "HostnameNotEntitled: another namespace's gRPC name"
	}
	return host, ""
}

// holds is what holds one entry: drain IDs (annotation entries naming its cluster, and its
// own drainRefs) and the NoExecute taints of its cluster the service does not tolerate.
type holds struct {
	ids, taints []string
}

func (h holds) held() bool { return len(h.ids) > 0 || len(h.taints) > 0 }

// holdsOf reads the drain, tolerations and taints inputs strictly; why is set when one does
// not parse (Published is then False: InvalidDrainAnnotation, InvalidTolerations,
// InvalidTaints).
func holdsOf(o observed) (map[string]holds, string) {
	out := map[string]holds{}
	for _, e := range o.Map.Spec.Entries {
		out[e.Cluster] = holds{ids: slices.Clone(e.DrainRefs)}
	}
	if v, ok := o.ISVC[annDrain]; ok {
		drains, err := oracleDrains(v)
		if err != nil {
			return nil, "InvalidDrainAnnotation: " + err.Error()
		}
		for id, cluster := range drains {
			if h, ok := out[cluster]; ok {
				h.ids = append(h.ids, id)
				out[cluster] = h
			}
		}
	}
	var tols []oracleToleration
	if v, ok := o.ISVC[annTolerations]; ok {
		var err error
		if tols, err = parseTolerations(v); err != nil {
			return nil, "InvalidTolerations: " + err.Error()
		}
	}
	for cluster, h := range out {
		v, ok := o.Taints[cluster]
		if !ok {
			continue
		}
		taints, err := parseTaints(v)
		if err != nil {
			return nil, fmt.Sprintf("InvalidTaints: workloadcluster %s: %s", cluster, err)
		}
		for _, t := range taints {
			if t.Effect == "NoExecute" && !slices.ContainsFunc(tols, func(tol oracleToleration) bool { return tol.tolerates(t) }) {
				h.taints = append(h.taints, t.String())
			}
		}
		out[cluster] = h
	}
	return out, ""
}

// oracleDrains parses the drain annotation as OME does: a JSON object keyed by non-empty,
// trimmed IDs, each an object with exactly the string fields cluster and reason, both
// non-empty and trimmed; no duplicates, nothing after it.
func oracleDrains(value string) (map[string]string, error) {
	dec := json.NewDecoder(strings.NewReader(value))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for dec.More() {
		id, err := stringToken(dec)
		if err != nil {
			return nil, err
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("duplicate override ID %q", id)
		}
		if !trimmedText(id) {
			return nil, fmt.Errorf("override ID %q must be non-empty and trimmed", id)
		}
		fields, err := stringObject(dec, []string{"cluster", "reason"})
		if err != nil {
			return nil, fmt.Errorf("override %q: %w", id, err)
		}
		if !trimmedText(fields["cluster"]) || !trimmedText(fields["reason"]) {
			return nil, fmt.Errorf("override %q: cluster and reason must be non-empty and trimmed", id)
		}
		out[id] = fields["cluster"]
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	return out, expectEnd(dec)
}

func trimmedText(s string) bool { return s != "" && strings.TrimSpace(s) == s }

// oracleTaint is one taint of a workload cluster.
type oracleTaint struct{ Key, Value, Effect string }

// String is key[=value]:Effect, the form ramps list in holds.
func (t oracleTaint) String() string {
	if t.Value == "" {
		return t.Key + ":" + t.Effect
	}
	return t.Key + "=" + t.Value + ":" + t.Effect
}

// oracleToleration is one toleration of the service.
type oracleToleration struct{ Key, Operator, Value, Effect string }

// tolerates is Kubernetes' matching: equal effects unless the toleration's is empty; Exists
// ignores the value and with an empty key matches every key; Equal needs key and value.
func (tol oracleToleration) tolerates(t oracleTaint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Operator == "Exists" {
		return tol.Key == "" || tol.Key == t.Key
	}
	return tol.Key == t.Key && tol.Value == t.Value
}

// parseTaints reads a taints annotation strictly: a JSON list (or null) of objects with a
// qualified-name key, an optional label-value value and an effect NoSchedule or NoExecute;
// no two with the same key and effect.
func parseTaints(value string) ([]oracleTaint, error) {
	objs, err := objectList(value, []string{"key", "value", "effect"})
	if err != nil {
		return nil, err
	}
	var out []oracleTaint
	seen := map[[2]string]bool{}
	for i, o := range objs {
		t := oracleTaint{Key: o["key"], Value: o["value"], Effect: o["effect"]}
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return nil, fmt.Errorf("taint %d key %q: %s", i, t.Key, errs[0])
		}
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return nil, fmt.Errorf("taint %d value %q: %s", i, t.Value, errs[0])
		}
		if t.Effect != "NoSchedule" && t.Effect != "NoExecute" {
			return nil, fmt.Errorf("taint %d effect %q", i, t.Effect)
		}
		k := [2]string{t.Key, t.Effect}
		if seen[k] {
			return nil, fmt.Errorf("taint %d: key %q and effect %s twice", i, t.Key, t.Effect)
		}
		seen[k] = true
		out = append(out, t)
	}
	return out, nil
}

// parseTolerations reads the tolerations annotation strictly: a JSON list (or null) of
// objects with optional key, operator (Exists, Equal or empty), value and effect; an empty
// key needs Exists, Exists takes no value.
func parseTolerations(value string) ([]oracleToleration, error) {
	objs, err := objectList(value, []string{"key", "operator", "value", "effect"})
	if err != nil {
		return nil, err
	}
	var out []oracleToleration
	for i, o := range objs {
		tol := oracleToleration{Key: o["key"], Operator: o["operator"], Value: o["value"], Effect: o["effect"]}
		if tol.Key != "" {
			if errs := validation.IsQualifiedName(tol.Key); len(errs) > 0 {
				return nil, fmt.Errorf("toleration %d key %q: %s", i, tol.Key, errs[0])
			}
		}
		switch tol.Operator {
		case "Exists":
			if tol.Value != "" {
				return nil, fmt.Errorf("toleration %d: a value with Exists", i)
			}
		case "Equal", "":
			if tol.Key == "" {
				return nil, fmt.Errorf("toleration %d: an empty key needs Exists", i)
			}
			if errs := validation.IsValidLabelValue(tol.Value); len(errs) > 0 {
				return nil, fmt.Errorf("toleration %d value %q: %s", i, tol.Value, errs[0])
			}
		default:
			return nil, fmt.Errorf("toleration %d operator %q", i, tol.Operator)
		}
		if tol.Effect != "" && tol.Effect != "NoSchedule" && tol.Effect != "NoExecute" {
			return nil, fmt.Errorf("toleration %d effect %q", i, tol.Effect)
		}
		out = append(out, tol)
	}
	return out, nil
}

// objectList decodes a JSON array (or null) of objects whose fields, from allowed, are
// strings, each at most once; nothing may follow it.
func objectList(value string, allowed []string) ([]map[string]string, error) {
	dec := json.NewDecoder(strings.NewReader(value))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	var out []map[string]string
	if tok != nil {
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return nil, fmt.Errorf("not a JSON array: %v", tok)
		}
		for dec.More() {
			o, err := stringObject(dec, allowed)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
		if err := expectDelim(dec, ']'); err != nil {
			return nil, err
		}
	}
	return out, expectEnd(dec)
}

// stringObject decodes one object whose fields, from allowed, are strings, each at most once.
func stringObject(dec *json.Decoder, allowed []string) (map[string]string, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for dec.More() {
		field, err := stringToken(dec)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(allowed, field) {
			return nil, fmt.Errorf("unknown field %q", field)
		}
		if _, dup := out[field]; dup {
			return nil, fmt.Errorf("duplicate field %q", field)
		}
		if out[field], err = stringToken(dec); err != nil {
			return nil, fmt.Errorf("field %q: %w", field, err)
		}
	}
	return out, expectDelim(dec, '}')
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("decode: %w", err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %v", tok)
	}
	return s, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}

func expectEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the value (%v)", err)
	}
	return nil
}

// oracleRamp is one cluster's gradual drain or undrain (docs/reference/commands.md, gradual drains).
type oracleRamp struct {
	Direction string   `json:"direction"`
	Start     string   `json:"start"`
	Duration  string   `json:"duration"`
	Steps     int      `json:"steps"`
	Step      int      `json:"step"`
	From      int64    `json:"from"`
	Holds     []string `json:"holds"`
}

// oracleRamps reads the ramp annotation ("" or absent: none) and its rules.
func oracleRamps(isvc map[string]string) (map[string]oracleRamp, error) {
	v := isvc[annRamp]
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw map[string]oracleRamp
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, err
	}
	for cluster, r := range raw {
		if r.Steps == 0 {
			r.Steps = 10
		}
		d, err := time.ParseDuration(r.Duration)
		_, terr := time.Parse(time.RFC3339Nano, r.Start)
		switch {
		case len(validation.IsDNS1123Subdomain(cluster)) > 0:
			return nil, fmt.Errorf("cluster %q is not a DNS-1123 subdomain", cluster)
		case r.Direction != "down" && r.Direction != "up":
			return nil, fmt.Errorf("cluster %s: direction %q", cluster, r.Direction)
		case terr != nil:
			return nil, fmt.Errorf("cluster %s: start %q", cluster, r.Start)
		case err != nil || d <= 0 || d > 24*time.Hour:
			return nil, fmt.Errorf("cluster %s: duration %q", cluster, r.Duration)
		case r.Steps < 1 || r.Steps > 100 || r.Step < 0 || r.Step > r.Steps:
			return nil, fmt.Errorf("cluster %s: step %d of %d", cluster, r.Step, r.Steps)
		case r.From < 0 || r.From > maxWeight:
			return nil, fmt.Errorf("cluster %s: from %d", cluster, r.From)
		case r.Direction == "down" && len(r.Holds) == 0:
			return nil, fmt.Errorf("cluster %s: a down ramp without holds", cluster)
		case r.Direction == "up" && (len(r.Holds) > 0 || r.From != 0):
			return nil, fmt.Errorf("cluster %s: holds or from on an up ramp", cluster)
		}
		raw[cluster] = r
	}
	return raw, nil
}

// shapes reports whether the ramp still shapes the entry's weight (weight: its TrafficMap
// weight; effective: without ramps): it has steps left and the entry is in its state, a down
// ramp on an entry held only by what it eases in and with a weight to ease from, an up ramp
// on an entry nothing holds with a positive weight.
func (r oracleRamp) shapes(weight, effective int32, h holds) bool {
	if r.Step >= r.Steps {
		return false
	}
	if r.Direction == "up" {
		return !h.held() && effective > 0
	}
	if !h.held() {
		return false
	}
	for _, x := range slices.Concat(h.ids, h.taints) {
		if !slices.Contains(r.Holds, x) {
			return false
		}
	}
	return r.From > 0 || weight > 0
}
