package httproute

import "slices"

// Unexported helpers the external tests reach.
var (
	ServiceMatches = serviceMatches
	RouteApply     = routeApply
	ServiceApply   = serviceApply
)

// ExpectedServices lists the Services s expects for map namespace/name, in name order, each
// as "name@resourceVersion" for one it wrote (or read) and "name deleted" for one it pruned.
func ExpectedServices(s *Sink, namespace, name string) []string {
	x := s.known
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byMap[mapKey(namespace, name)]
	if e == nil {
		return nil
	}
	var out []string
	for n, exp := range e.services {
		if exp.deleted {
			out = append(out, n+" deleted")
		} else {
			out = append(out, n+"@"+exp.svc.ResourceVersion)
		}
	}
	slices.Sort(out)
	return out
}

// EndpointSliceApply exports endpointSliceApply.
var EndpointSliceApply = endpointSliceApply
