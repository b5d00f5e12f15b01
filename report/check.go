package report

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// ErrNotPublished is wrapped by Check's errors: what is published is not what the inputs say.
var ErrNotPublished = errors.New("not published")

// StatusOf computes the status of tm (as read by the caller) from its objects, as Status does.
func (r Reader) StatusOf(ctx context.Context, tm *v1beta1.TrafficMap) (Status, error) {
	o, err := r.objects(ctx, tm)
	if err != nil {
		return Status{}, err
	}
	return Build(o), nil
}

// Check reports whether what is published is what the inputs say: the effective weights
// can be computed, the Published condition is True at the map's generation and, when the
// publisher's HTTPRoute for the map exists, it is the publisher's and its backend weights
// are the computed effective weights. It returns nil then, else an error wrapping
// ErrNotPublished that names the first difference. Without an HTTPRoute (the xDS sink
// alone) only the condition tells.
func Check(s Status) error {
	p := s.Published
	r := s.Sinks.HTTPRoute
	switch {
	case s.Error != "":
		return fmt.Errorf("%w: effective weights cannot be computed: %s", ErrNotPublished, s.Error)
	case p.Status != "True":
		return fmt.Errorf("%w: published is %s (%s): %s", ErrNotPublished, p.Status, p.Reason, p.Message)
	case p.Freshness != Current:
		return fmt.Errorf("%w: published at generation %d, the trafficmap is at generation %d", ErrNotPublished, p.ObservedGeneration, s.Generation)
	case r.Found && !r.Owned:
		return fmt.Errorf("%w: route %s is not the publisher's", ErrNotPublished, r.Name)
	case r.Found && !r.MatchesComputed:
		return fmt.Errorf("%w: route %s holds %s, the inputs give %s", ErrNotPublished, r.Name, routeWeightList(r.Weights), effectiveList(s.Clusters))
	}
	return nil
}

func routeWeightList(ws []RouteWeight) string {
	parts := make([]string, 0, len(ws))
	for _, w := range ws {
		name := w.Cluster
		if name == "" {
			name = w.Backend
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, w.Weight))
	}
	return strings.Join(parts, ", ")
}

func effectiveList(cs []Cluster) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		if c.Effective != nil {
			parts = append(parts, fmt.Sprintf("%s=%d", c.Cluster, *c.Effective))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
