package publish

import (
	"fmt"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// checkAPIs fails fast, with a message naming what to install, when a resource the
// publisher watches is not served. With the HTTPRoute sink off, the routes it wrote before
// are watched only when HTTPRoutes are served (none can exist otherwise).
func (p *Publisher) checkAPIs() error {
	for _, want := range []struct {
		groupVersion, resource, hint string
		needed                       bool
	}{
		{v1beta1.SchemeGroupVersion.String(), "trafficmaps", "install the TrafficMap CRD (config/crd, or the chart with crds.install=true) or OME", true},
		{v1beta1.SchemeGroupVersion.String(), "inferenceservices", "install OME's InferenceService CRD", true},
		{gwapiv1.GroupVersion.String(), "httproutes", "install the Gateway API standard CRDs, or run with --sinks xds",
			p.cfg.sinkOn(SinkHTTPRoute)},
	} {
		gv, _ := schema.ParseGroupVersion(want.groupVersion) // constants above: cannot fail
		found, err := p.served(gv.WithResource(want.resource))
		if err != nil {
			return err
		}
		if !found && want.needed {
			return fmt.Errorf("%w: the api server does not serve %s %s: %s", ErrInvalidConfig, want.groupVersion, want.resource, want.hint)
		}
		if !found && want.resource == "httproutes" {
			p.caches.routes = nil // no route of the disabled HTTPRoute sink to retire
		}
	}
	return nil
}

// newBucket is the queue's overall rate limit: it bounds retries across all keys.
func newBucket() *rate.Limiter { return rate.NewLimiter(rate.Limit(50), 300) }
