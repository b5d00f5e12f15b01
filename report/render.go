package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// Outputs are the -o values.
var Outputs = []string{"table", "json", "yaml"}

// Write writes v (a Status or a ClusterTraffic) as a table, JSON or YAML.
func Write(w io.Writer, v any, output string) error {
	var out []byte
	var err error
	switch output {
	case "json":
		out, err = json.MarshalIndent(v, "", "  ")
		out = append(out, '\n')
	case "yaml":
		out, err = yaml.Marshal(v)
	case "table":
		switch r := v.(type) {
		case Status:
			out = []byte(statusTable(r))
		case ClusterTraffic:
			out = []byte(clusterTable(r))
		default:
			return fmt.Errorf("no table for %T", v)
		}
	default:
		return fmt.Errorf("output must be table, json or yaml")
	}
	if err != nil {
		return fmt.Errorf("render %s: %w", output, err)
	}
	_, err = w.Write(out)
	return err
}

// statusTable renders s as the status command's table: the clusters, the ramps under way,
// the pending drains, the summary (inputs, Published and each sink), then the xDS clients
// and the replicas when there are any.
func statusTable(s Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "TrafficMap %s/%s generation %d, InferenceService %s\n\n", s.Namespace, s.TrafficMap, s.Generation, s.Service)
	writeClusters(&b, s)
	writeRamps(&b, s)
	writePending(&b, s)
	b.WriteString("\n")
	writeSummary(&b, s)
	writeXDSClients(&b, s)
	writeReplicas(&b, s)
	return b.String()
}

// newTable returns the tabwriter every table of the status output uses.
func newTable(b *strings.Builder) *tabwriter.Writer {
	return tabwriter.NewWriter(b, 0, 0, 3, ' ', 0)
}

// writeClusters writes the table of s's clusters (weight, effective weight, what holds
// it), and why the effective weights are unknown when they are.
func writeClusters(b *strings.Builder, s Status) {
	tw := newTable(b)
	fmt.Fprint(tw, "CLUSTER\tWEIGHT\tEFFECTIVE\tHELD BY\n")
	for _, c := range s.Clusters {
		eff := "?"
		if c.Effective != nil {
			eff = strconv.Itoa(int(*c.Effective))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Cluster, c.Weight, eff, holds(c.HeldBy, c.Taints))
	}
	_ = tw.Flush()
	if s.Error != "" {
		fmt.Fprintf(b, "effective weights unknown: %s\n", s.Error)
	}
}

// writeRamps writes the table of s's ramps under way, nothing when there are none.
func writeRamps(b *strings.Builder, s Status) {
	if len(s.Ramps) == 0 {
		return
	}
	b.WriteString("\nRamps (gradual drains and undrains under way):\n")
	tw := newTable(b)
	fmt.Fprint(tw, "CLUSTER\tDIRECTION\tSTEP\tSHARE\tNEXT STEP DUE\tENDS\n")
	for _, r := range s.Ramps {
		next := r.Next.Format(time.RFC3339)
		if r.Step+1 >= r.Steps {
			next = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d%%\t%s\t%s\n", r.Cluster, r.Direction, r.Step, r.Steps, r.Percent, next, r.End.Format(time.RFC3339))
	}
	_ = tw.Flush()
}

// writePending writes s's pending drains (drains of a cluster the map has no entry for),
// or "none".
func writePending(b *strings.Builder, s Status) {
	b.WriteString("\nPending drains (no such entry):")
	if len(s.Pending) == 0 {
		b.WriteString(" none\n")
		return
	}
	b.WriteString("\n")
	tw := newTable(b)
	fmt.Fprint(tw, "ID\tCLUSTER\tREASON\n")
	for _, d := range s.Pending {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.ID, d.Cluster, strconv.Quote(d.Reason))
	}
	_ = tw.Flush()
}

// writeSummary writes the key-value summary: the drain annotation, malformed taints and
// tolerations, the tolerations in effect, the hostnames another claim holds, the Published
// condition, the PublicationFallback condition (when the map has one), and one line (or a
// few) per sink.
func writeSummary(b *strings.Builder, s Status) {
	tw := newTable(b)
	fmt.Fprintf(tw, "Drain annotation\t%s\n", drainLine(s.Drains))
	if s.TaintError != "" {
		fmt.Fprintf(tw, "Taints\tMalformed: %s\n", s.TaintError)
	}
	if s.TolerationError != "" {
		fmt.Fprintf(tw, "Tolerations\tMalformed: %s\n", s.TolerationError)
	}
	if len(s.Tolerations) > 0 {
		fmt.Fprintf(tw, "Tolerations in effect\t%s\n", strings.Join(s.Tolerations, ", "))
	}
	if held := hostnameLine(s.Hostnames); held != "" {
		fmt.Fprintf(tw, "Hostnames\t%s\n", held)
	}
	p := s.Published
	fmt.Fprintf(tw, "Published\t%s\n", publishedLine(s))
	if p.LastTransitionTime != nil {
		fmt.Fprintf(tw, "Last transition\t%s\n", p.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	if p.Message != "" {
		fmt.Fprintf(tw, "Message\t%s\n", p.Message)
	}
	if fb := s.PublicationFallback; fb != nil {
		fmt.Fprintf(tw, "Fallback\t%s (%s): %s\n", fb.Status, fb.Reason, fb.Message)
	}
	writeRouteSink(tw, s)
	fmt.Fprintf(tw, "xDS sink\t%s\n", xdsLine(s.Sinks.XDS))
	_ = tw.Flush()
}

// publishedLine renders the Published condition: its status, reason and freshness against
// the map's generation.
func publishedLine(s Status) string {
	p := s.Published
	pub := p.Status
	if p.Reason != "" {
		pub += " (" + p.Reason + ")"
	}
	switch p.Freshness {
	case Current:
		pub += fmt.Sprintf(", Current: observedGeneration %d is the generation", p.ObservedGeneration)
	case Stale:
		pub += fmt.Sprintf(", Stale: observedGeneration %d, generation %d", p.ObservedGeneration, s.Generation)
	default:
		pub += ", no Published condition"
	}
	return pub
}

// writeRouteSink writes the HTTPRoute sink's lines of the summary: the route, whether its
// weights are the computed ones, and the gateway's verdict.
func writeRouteSink(tw *tabwriter.Writer, s Status) {
	r := s.Sinks.HTTPRoute
	switch {
	case !r.Found:
		fmt.Fprintf(tw, "HTTPRoute sink\troute %s: not found\n", r.Name)
	case !r.Owned:
		fmt.Fprintf(tw, "HTTPRoute sink\troute %s generation %d: %s\n", r.Name, r.Generation, r.Message)
	default:
		fmt.Fprintf(tw, "HTTPRoute sink\troute %s generation %d (trafficmap generation %s): %s\n", r.Name, r.Generation, r.TrafficMapGeneration, routeWeights(r.Weights))
		match := "no"
		if r.MatchesComputed {
			match = "yes"
		}
		fmt.Fprintf(tw, "Route weights = computed\t%s\n", match)
		if r.Gateway != "" {
			fmt.Fprintf(tw, "Gateway\t%s: %s at route generation %d\n", r.Gateway, r.Verdict, r.Generation)
		}
		fmt.Fprintf(tw, "Gateway message\t%s\n", r.Message)
	}
}

// writeXDSClients writes the table of the xDS clients of s's map, nothing when there are
// none.
func writeXDSClients(b *strings.Builder, s Status) {
	x := s.Sinks.XDS
	if len(x.Clients) == 0 {
		return
	}
	b.WriteString("\n")
	tw := newTable(b)
	fmt.Fprint(tw, "XDS CLIENT\tFLAVOUR\tSTATE\tACKED\tNACKED\n")
	for _, c := range x.Clients {
		state := "Behind"
		if c.Current {
			state = "Current"
		}
		nacks := make([]string, 0, len(c.Nacked))
		for _, typ := range slices.Sorted(maps.Keys(c.Nacked)) {
			n := c.Nacked[typ]
			nacks = append(nacks, fmt.Sprintf("%s=%s %s", typ, n.Version, strconv.Quote(n.Message)))
		}
		nacked := "-"
		if len(nacks) > 0 {
			nacked = strings.Join(nacks, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", plain(c.NodeID), plain(string(c.Flavour)), state, typeVersions(c.Acked), nacked)
	}
	_ = tw.Flush()
}

// writeReplicas writes the table of the publisher replicas' xDS reports, nothing when there
// are none.
func writeReplicas(b *strings.Builder, s Status) {
	x := s.Sinks.XDS
	if len(x.Replicas) == 0 {
		return
	}
	b.WriteString("\n")
	tw := newTable(b)
	fmt.Fprint(tw, "REPLICA\tLIVE\tXDS CLIENTS\tUNCONFIRMED MAPS\tREPORTED\n")
	for _, r := range x.Replicas {
		unconfirmed := strconv.Itoa(r.Unconfirmed)
		if r.Overflow {
			unconfirmed += "+"
		}
		name := plain(r.Identity)
		if r.Self {
			name += " (this one)"
		}
		fmt.Fprintf(tw, "%s\t%t\t%d\t%s\t%s\n", name, r.Live, r.Clients, unconfirmed, r.Renewed.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
}

// hostnameLine renders the map's names and their holders when another claim holds one,
// e.g. `chat.example.com held by trafficmap prod/chat (chat.example.com, created ...),
// chat.staging held`; "" when the map holds every name.
func hostnameLine(hs []Hostname) string {
	if !slices.ContainsFunc(hs, func(h Hostname) bool { return !h.Held }) {
		return ""
	}
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		if h.Held {
			parts = append(parts, h.Name+" held")
			continue
		}
		o := h.Owner
		parts = append(parts, fmt.Sprintf("%s held by %s %s/%s (%s, created %s)", h.Name, strings.ToLower(o.Kind), o.Namespace, o.Name,
			o.Hostname, o.Created.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, ", ")
}

// plain returns s when it has no space, quote or non-printable character, else s quoted:
// node ids come from the clients and must not move the table or drive the terminal.
func plain(s string) string {
	if q := strconv.Quote(s); s != "" && q[1:len(q)-1] == s && !strings.ContainsAny(s, " \t") {
		return s
	}
	return strconv.Quote(s)
}

// XDSUnavailable is the table's xDS line when the publisher's /debug/xds was not read.
const XDSUnavailable = "client state not available: it is read from the publisher's /debug/xds, with --publisher-url http://HOST:PORT (its --debug-address when set, else its --http-address)"

// xdsLine is the table's xDS summary: where it was read, what is served, how many clients.
func xdsLine(x XDSSink) string {
	if !x.Reported {
		return XDSUnavailable
	}
	served := make([]string, 0, len(x.Served))
	for _, f := range slices.Sorted(maps.Keys(x.Served)) {
		served = append(served, fmt.Sprintf("%s: %s", f, typeVersions(x.Served[f])))
	}
	if len(served) == 0 {
		served = append(served, "no snapshot")
	}
	current := 0
	for _, c := range x.Clients {
		if c.Current {
			current++
		}
	}
	line := fmt.Sprintf("publisher %s serves %s; %d/%d connected clients ACKed the versions served", x.Source, strings.Join(served, "; "), current, len(x.Clients))
	switch m := x.Map; {
	case m == nil:
		line += "; the publisher reports no xds relevance for this map"
	case len(m.Relevant) == 0:
		line += "; no connected client is subscribed to this map's resources"
	default:
		line += fmt.Sprintf("; this map: %d/%d relevant clients ACKed its content", len(m.Acked), len(m.Relevant))
		if len(m.Waiting) > 0 {
			waiting := make([]string, 0, len(m.Waiting))
			for _, id := range m.Waiting {
				waiting = append(waiting, plain(id))
			}
			line += ", waiting for " + strings.Join(waiting, ", ")
		}
	}
	return line
}

// typeVersions formats versions per resource type, sorted by type.
func typeVersions(vs map[string]string) string {
	if len(vs) == 0 {
		return "nothing"
	}
	parts := make([]string, 0, len(vs))
	for _, typ := range slices.Sorted(maps.Keys(vs)) {
		parts = append(parts, typ+"="+vs[typ])
	}
	return strings.Join(parts, ", ")
}

func holds(hs []Hold, taints []string) string {
	if len(hs) == 0 && len(taints) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(hs)+len(taints))
	for _, h := range hs {
		switch h.Source {
		case "drainRefs":
			parts = append(parts, h.ID+" (drainRefs only)")
		default:
			parts = append(parts, h.ID+" "+strconv.Quote(h.Reason))
		}
	}
	for _, t := range taints {
		parts = append(parts, "taint "+t)
	}
	return strings.Join(parts, ", ")
}

func drainLine(d DrainState) string {
	in := make([]string, 0, len(d.InEffect))
	for _, x := range d.InEffect {
		in = append(in, x.ID+" on "+x.Cluster)
	}
	set := "none"
	if len(in) > 0 {
		set = strings.Join(in, ", ")
	}
	switch d.State {
	case AnnotationMalformed:
		if d.NoFallback {
			return "Malformed: " + d.Error
		}
		return "Malformed: " + d.Error + "; the publisher keeps the last valid drains: " + set
	case AnnotationValid:
		return "Valid: " + set
	}
	return "Absent: no drains"
}

func routeWeights(ws []RouteWeight) string {
	if len(ws) == 0 {
		return "no backends"
	}
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		name := w.Cluster
		if name == "" {
			name = "backend " + w.Backend
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, w.Weight))
	}
	return strings.Join(parts, ", ")
}

func clusterTable(c ClusterTraffic) string {
	var b strings.Builder
	if len(c.Services) == 0 {
		scope := "namespace " + c.Namespace
		if c.Namespace == "" {
			scope = "any namespace"
		}
		fmt.Fprintf(&b, "No service in %s sends traffic to workload cluster %s.\n", scope, c.Cluster)
		return b.String()
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "NAMESPACE\tSERVICE\tWEIGHT\tEFFECTIVE\tPUBLISHED\tNOTE\n")
	for _, s := range c.Services {
		eff, note := "?", "-"
		if s.Effective != nil {
			eff = strconv.Itoa(int(*s.Effective))
		}
		if s.Error != "" {
			note = "effective weight unknown: " + s.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Namespace, s.Service, s.Weight, eff, s.Published, note)
	}
	_ = tw.Flush()
	return b.String()
}
