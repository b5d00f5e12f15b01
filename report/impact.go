package report

import (
	"context"
	"fmt"
	"io"
	"maps"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// Objects reads what tm's status is computed from: its InferenceService's metadata, its
// route, the taint sources of its entry clusters and, unless NoHostnames, the other maps'
// claims. A refused read wraps ErrForbidden.
func (r Reader) Objects(ctx context.Context, tm *v1beta1.TrafficMap) (Objects, error) {
	return r.objects(ctx, tm)
}

// Impact is one service's effective weights, as model.Compute gives them, before and after
// a change of its inputs (a drain, undrain, taint or untaint): before, the weights published
// now (a ramp under way at its current step); after, where the change ends (every ramp
// over: a ramp only eases the way there).
type Impact struct {
	Namespace  string `json:"namespace"`
	TrafficMap string `json:"trafficMap"`
	Service    string `json:"service"`
	// Clusters has one row per entry, sorted by cluster.
	Clusters []ImpactCluster `json:"clusters"`
	// Error says why the weights before or after cannot be computed; empty when they can.
	Error string `json:"error,omitempty"`
}

// ImpactCluster is one entry's effective weight before and after; nil when unknown.
type ImpactCluster struct {
	Cluster string `json:"cluster"`
	Weight  int32  `json:"weight"`
	Before  *int32 `json:"before"`
	After   *int32 `json:"after"`
}

// Computable reports whether both weight sets could be computed.
func (i Impact) Computable() bool { return i.Error == "" }

// Moves reports whether the change moves traffic: an effective weight changes, or the
// weights cannot be computed (then it cannot be shown that nothing moves).
func (i Impact) Moves() bool {
	if !i.Computable() {
		return true
	}
	for _, c := range i.Clusters {
		if *c.Before != *c.After {
			return true
		}
	}
	return false
}

// StopsTraffic reports whether the change leaves the service with no positive effective
// weight while it had one before: all traffic to the service stops. A service already
// without traffic is not stopped by the change.
func (i Impact) StopsTraffic() bool {
	return i.Computable() && positive(i.Clusters, true) && !positive(i.Clusters, false)
}

// Guarded reports whether the last-serving guard refuses the change without
// --allow-no-traffic: it stops all traffic, or the weights cannot be computed, so it cannot
// be shown that traffic continues.
func (i Impact) Guarded() bool { return !i.Computable() || i.StopsTraffic() }

func positive(cs []ImpactCluster, before bool) bool {
	for _, c := range cs {
		w := c.After
		if before {
			w = c.Before
		}
		if *w > 0 {
			return true
		}
	}
	return false
}

// Ref is the service as "namespace/service".
func (i Impact) Ref() string { return model.Key(i.Namespace, i.Service).String() }

// Effective computes o's effective weights with the publisher's computation and checks
// (model.Compute over the map, the source's annotations, the owned route's record and
// the taint sources), as Build does.
func Effective(o Objects) (model.Computed, error) {
	route := o.Route
	if route != nil && !httproute.Owned(route.Labels, httproute.Source{Namespace: o.TrafficMap.Namespace, Name: o.TrafficMap.Name}) {
		route = nil
	}
	return compute(o, route)
}

// WithAnnotations returns o with the InferenceService's annotations replaced by
// annotations (o itself is not modified): the inputs after a drain or undrain.
func (o Objects) WithAnnotations(annotations map[string]string) Objects {
	if o.Source != nil {
		src := o.Source.DeepCopy()
		src.Annotations = maps.Clone(annotations)
		o.Source = src
	}
	return o
}

// WithClusterTaints returns o with every view of ct.Kind on ct.Cluster replaced by ct,
// added when there was none (o itself is not modified): the inputs after a taint or
// untaint.
func (o Objects) WithClusterTaints(ct model.ClusterTaints) Objects {
	out := make([]model.ClusterTaints, 0, len(o.Clusters)+1)
	for _, c := range o.Clusters {
		if c.Kind != ct.Kind || c.Cluster != ct.Cluster {
			out = append(out, c)
		}
	}
	o.Clusters = append(out, ct)
	return o
}

// NewImpact computes the effective weights of before and after (the same map, with the
// inputs before and after a change).
func NewImpact(before, after Objects) Impact {
	tm := before.TrafficMap
	imp := Impact{Namespace: tm.Namespace, TrafficMap: tm.Name, Service: tm.Spec.Service, Clusters: []ImpactCluster{}}
	b, errB := Effective(before)
	a, errA := Effective(after)
	rows := map[string]*ImpactCluster{}
	for _, e := range tm.Spec.Entries {
		rows[e.Cluster] = &ImpactCluster{Cluster: e.Cluster, Weight: e.Weight}
	}
	switch {
	case errB != nil:
		imp.Error = "before: " + errB.Error()
	case errA != nil:
		imp.Error = "after: " + errA.Error()
	default:
		for _, e := range b.Result.Entries {
			if r := rows[e.Cluster]; r != nil {
				r.Before = ptr(e.Effective)
			}
		}
		for _, e := range a.Final.Entries {
			if r := rows[e.Cluster]; r != nil {
				r.After = ptr(e.Effective)
			}
		}
	}
	for _, r := range rows {
		if imp.Error == "" && (r.Before == nil || r.After == nil) {
			imp.Error = fmt.Sprintf("no effective weight for cluster %s", r.Cluster)
		}
		imp.Clusters = append(imp.Clusters, *r)
	}
	sort.Slice(imp.Clusters, func(i, j int) bool { return imp.Clusters[i].Cluster < imp.Clusters[j].Cluster })
	if imp.Error != "" {
		for i := range imp.Clusters {
			imp.Clusters[i].Before, imp.Clusters[i].After = nil, nil
		}
	}
	return imp
}

// StopsMessage says in words that the change stops all traffic to the service.
func StopsMessage(i Impact) string {
	return fmt.Sprintf("all traffic to InferenceService %s stops: no workload cluster keeps a positive effective weight", i.Ref())
}

// UnknownMessage says that the guard cannot show that traffic to the service continues.
func UnknownMessage(i Impact) string {
	return fmt.Sprintf("the effective weights of InferenceService %s cannot be computed (%s), so it cannot be shown that traffic to it continues", i.Ref(), i.Error)
}

// WriteImpacts writes, per service, a table of its entries' TrafficMap weight and effective
// weights before and after, followed by a line for a service whose traffic stops or whose
// weights cannot be computed; "No service's traffic moves." when imps is empty.
func WriteImpacts(w io.Writer, imps []Impact) error {
	var b strings.Builder
	if len(imps) == 0 {
		b.WriteString("No service's traffic moves.\n")
	}
	for _, imp := range imps {
		fmt.Fprintf(&b, "Effective weights of InferenceService %s (TrafficMap %s):\n", imp.Ref(), imp.TrafficMap)
		tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
		fmt.Fprint(tw, "  CLUSTER\tWEIGHT\tBEFORE\tAFTER\n")
		for _, c := range imp.Clusters {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", c.Cluster, c.Weight, weightOrUnknown(c.Before), weightOrUnknown(c.After))
		}
		_ = tw.Flush()
		switch {
		case !imp.Computable():
			b.WriteString("  Unknown: " + UnknownMessage(imp) + ".\n")
		case imp.StopsTraffic():
			b.WriteString("  NO TRAFFIC: " + StopsMessage(imp) + ".\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func weightOrUnknown(w *int32) string {
	if w == nil {
		return "?"
	}
	return fmt.Sprint(*w)
}
