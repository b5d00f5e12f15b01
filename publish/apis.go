package publish

import (
	"fmt"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// checkAPIs fails fast, with a message naming what to install, when a resource the
// publisher watches is not served.
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
		if !want.needed {
			continue
		}
		list, err := p.clients.kube.Discovery().ServerResourcesForGroupVersion(want.groupVersion)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("discover %s: %w", want.groupVersion, err)
		}
		found := false
		if list != nil {
			for _, r := range list.APIResources {
				found = found || r.Name == want.resource
			}
		}
		if !found {
			return fmt.Errorf("%w: the api server does not serve %s %s: %s", ErrInvalidConfig, want.groupVersion, want.resource, want.hint)
		}
	}
	return nil
}

// newBucket is the queue's overall rate limit: it bounds retries across all keys.
func newBucket() *rate.Limiter { return rate.NewLimiter(rate.Limit(50), 300) }
