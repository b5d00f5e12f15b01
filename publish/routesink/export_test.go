package routesink

import "slices"

// ExpectedServices lists the Services s expects for map namespace/name, in name order, each
// as "name@resourceVersion" for one it wrote (or read) and "name deleted" for one it pruned.
func ExpectedServices(s *Sink, namespace, name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.expected[mapKey(namespace, name)]
	if e == nil {
		return nil
	}
	var out []string
	for n, x := range e.services {
		if x.deleted {
			out = append(out, n+" deleted")
		} else {
			out = append(out, n+"@"+x.svc.ResourceVersion)
		}
	}
	slices.Sort(out)
	return out
}
