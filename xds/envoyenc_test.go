package xds

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/trafficmap/publisher/weights"
)

// encService is ns/name with one https entry per cluster (weighted 1, 2, ...), the clusters
// in drained drained.
func encService(t *testing.T, ns, name string, clusters []string, drained ...string) Service {
	t.Helper()
	return encUnsealed(t, ns, name, clusters, drained...).Sealed()
}

// encUnsealed is encService before Sealed, for a test to change.
func encUnsealed(t *testing.T, ns, name string, clusters []string, drained ...string) Service {
	t.Helper()
	var in weights.Input
	for i, c := range clusters {
		in.Entries = append(in.Entries, weights.Entry{Cluster: c, Endpoint: fmt.Sprintf("https://%s.%s.example.com", name, c), Weight: int64(i + 1)})
	}
	for _, c := range drained {
		in.Drains = append(in.Drains, weights.Drain{ID: "m-" + c, Cluster: c, Reason: "maintenance"})
	}
	res, err := weights.Compute(in)
	require.NoError(t, err)
	return Service{Namespace: ns, Name: name, Service: name, Hostnames: []string{name + "." + ns + ".example.com"}, Result: res}
}

// encFleet is n services ns/svc-00, ns/svc-01, ... (encService) on clusters.
func encFleet(t *testing.T, ns string, n int, clusters []string) []Service {
	t.Helper()
	out := make([]Service, 0, n)
	for i := range n {
		out = append(out, encService(t, ns, fmt.Sprintf("svc-%02d", i), clusters))
	}
	return out
}

// served is every resource a server serves to flavour: by type, by name, its version and
// encoding.
func served(t *testing.T, srv *Server, flavour Flavour) map[string]map[string][2]string {
	t.Helper()
	out := map[string]map[string][2]string{}
	for _, typ := range servedTypes {
		c := srv.cache.cache(string(flavour), typ)
		out[typ] = map[string][2]string{}
		c.mu.Lock()
		for name, e := range c.resources {
			r, err := c.enc.encoded(e)
			require.NoError(t, err)
			out[typ][name] = [2]string{e.version, string(r.GetValue())}
		}
		c.mu.Unlock()
	}
	return out
}

// A Translator's Envoy flavour, held encoded, is served with the same versions and the
// same bytes as the messages TranslateEnvoy makes of the same services, through a first
// snapshot, a drain, an added service, a changed and a removed one; the versions are
// TypeVersions' of the messages.
func TestEnvoyHeldEncodedServesTheSameBytes(t *testing.T) {
	ctx := context.Background()
	workers := []string{"worker-a", "worker-b", "worker-c"}
	fleet := map[string]Service{}
	for i := range 20 { // more virtual hosts than largeRoute: the route is encoded from its virtual hosts'
		s := encService(t, fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("svc-%d", i), workers)
		fleet[s.key()] = s
	}
	tr := NewTranslator(DefaultEnvoyOptions)
	fromMsgs, fromHeld := NewServer(ServerConfig{}), NewServer(ServerConfig{})
	for _, step := range []struct {
		name    string
		changed []Service
		removed []string
	}{
		{"first", values(fleet), nil},
		{"a drain", []Service{encService(t, "ns-1", "svc-4", workers, "worker-a")}, nil},
		{"nothing", nil, nil},
		{"an added service", []Service{encService(t, "ns-0", "svc-99", workers)}, nil},
		{"a cluster added", []Service{encService(t, "ns-2", "svc-5", append(workers, "worker-d"))}, nil},
		{"a cluster removed and another added", []Service{encService(t, "ns-2", "svc-5", []string{"worker-a", "worker-e"})}, nil},
		{"a removed service", nil, []string{"ns-0/svc-3"}},
	} {
		for _, s := range step.changed {
			fleet[s.key()] = s
		}
		for _, key := range step.removed {
			delete(fleet, key)
		}
		tr.Update(step.changed, step.removed)
		held, err := tr.Resources(FlavourEnvoy)
		require.NoError(t, err, step.name)
		require.Nil(t, held.Clusters, step.name)
		msgs, err := TranslateEnvoy(DefaultEnvoyOptions, values(fleet))
		require.NoError(t, err, step.name)
		want, err := fromMsgs.SetResources(ctx, FlavourEnvoy, msgs)
		require.NoError(t, err, step.name)
		got, err := fromHeld.SetResources(ctx, FlavourEnvoy, held)
		require.NoError(t, err, step.name)
		assert.Equal(t, want, got, "%s: versions", step.name)
		typeVersions, err := TypeVersions(held)
		require.NoError(t, err, step.name)
		assert.Equal(t, want, typeVersions, "%s: TypeVersions", step.name)
		require.NoError(t, Validate(held), step.name)
		assert.Equal(t, served(t, fromMsgs, FlavourEnvoy), served(t, fromHeld, FlavourEnvoy), "%s: what is served", step.name)
	}
}

// A drain of one service re-encodes only that service's resources: every other virtual
// host and every cluster (the drain changes none) is the same encoding as before, the
// server keeps serving the same cluster entries, and only the route configuration is set
// again.
func TestEnvoyDrainReencodesOneService(t *testing.T) {
	ctx := context.Background()
	workers := []string{"worker-a", "worker-b"}
	fleet := encFleet(t, "prod", 20, workers)
	tr := NewTranslator(DefaultEnvoyOptions)
	srv := NewServer(ServerConfig{})
	tr.Update(fleet, nil)
	before, err := tr.Resources(FlavourEnvoy)
	require.NoError(t, err)
	v1, err := srv.SetResources(ctx, FlavourEnvoy, before)
	require.NoError(t, err)
	clusters := srv.cache.cache(string(FlavourEnvoy), resource.ClusterType).entries()
	routes := srv.cache.cache(string(FlavourEnvoy), resource.RouteType).entries()

	tr.Update([]Service{encService(t, "prod", "svc-07", workers, "worker-a")}, nil)
	after, err := tr.Resources(FlavourEnvoy)
	require.NoError(t, err)
	v2, err := srv.SetResources(ctx, FlavourEnvoy, after)
	require.NoError(t, err)

	for i, vh := range after.envoy.vhosts {
		if vh.name == "prod/svc-07" {
			assert.NotSame(t, before.envoy.vhosts[i], vh, "the drained service's virtual host is encoded again")
			continue
		}
		assert.Same(t, before.envoy.vhosts[i], vh, "%s's virtual host is the same encoding", vh.name)
	}
	require.Len(t, after.envoy.clusters, len(before.envoy.clusters))
	for i, c := range after.envoy.clusters {
		assert.Same(t, before.envoy.clusters[i], c, "cluster %s is the same encoding", c.name)
	}
	assert.Equal(t, v1[resource.ClusterType], v2[resource.ClusterType], "the cluster version stays")
	assert.Equal(t, v1[resource.ListenerType], v2[resource.ListenerType], "the listener version stays")
	assert.NotEqual(t, v1[resource.RouteType], v2[resource.RouteType], "the route configuration is new")
	for name, e := range srv.cache.cache(string(FlavourEnvoy), resource.ClusterType).entries() {
		assert.Same(t, clusters[name], e, "cluster %s: the same entry is served", name)
	}
	for name, e := range srv.cache.cache(string(FlavourEnvoy), resource.RouteType).entries() {
		assert.NotSame(t, routes[name], e, "route configuration %s is set again", name)
	}
}

// The Server rejects an encoded Envoy set that the message path rejects: two services
// with a domain in common (also when a change of one takes the other's domain), and a
// service whose own checks fail; it serves the next valid one.
func TestEnvoyHeldEncodedIsValidated(t *testing.T) {
	ctx := context.Background()
	workers := []string{"worker-a", "worker-b"}
	chat := encService(t, "prod", "chat", workers)
	other := encUnsealed(t, "prod", "other", workers)
	other.Hostnames = chat.Hostnames
	other = other.Sealed()
	badHost := encUnsealed(t, "prod", "bad", workers)
	badHost.Hostnames = []string{"bad\nhost"}
	badHost = badHost.Sealed()
	for name, services := range map[string][]Service{"a shared domain": {chat, other}, "an invalid hostname": {chat, badHost}} {
		msgs, err := TranslateEnvoy(DefaultEnvoyOptions, services)
		require.NoError(t, err, name)
		require.ErrorIs(t, Validate(msgs), ErrInvalidResources, name)
		tr := NewTranslator(DefaultEnvoyOptions)
		srv := NewServer(ServerConfig{})
		tr.Update([]Service{chat}, nil)
		good, err := tr.Resources(FlavourEnvoy)
		require.NoError(t, err, name)
		_, err = srv.SetResources(ctx, FlavourEnvoy, good)
		require.NoError(t, err, name)
		tr.Update(services, nil)
		held, err := tr.Resources(FlavourEnvoy)
		require.NoError(t, err, name)
		_, err = srv.SetResources(ctx, FlavourEnvoy, held)
		require.ErrorIs(t, err, ErrInvalidResources, name)
		require.ErrorIs(t, Validate(held), ErrInvalidResources, name)
		tr.Update(nil, []string{services[1].key()})
		again, err := tr.Resources(FlavourEnvoy)
		require.NoError(t, err, name)
		_, err = srv.SetResources(ctx, FlavourEnvoy, again)
		require.NoError(t, err, name)
	}

	// A change that keeps every name (checked only where it changed) and takes a domain.
	tr := NewTranslator(DefaultEnvoyOptions)
	srv := NewServer(ServerConfig{})
	own := encService(t, "prod", "other", workers)
	tr.Update([]Service{chat, own}, nil)
	good, err := tr.Resources(FlavourEnvoy)
	require.NoError(t, err)
	_, err = srv.SetResources(ctx, FlavourEnvoy, good)
	require.NoError(t, err)
	tr.Update([]Service{other}, nil)
	held, err := tr.Resources(FlavourEnvoy)
	require.NoError(t, err)
	_, err = srv.SetResources(ctx, FlavourEnvoy, held)
	require.ErrorIs(t, err, ErrInvalidResources)
	_, err = srv.SetResources(ctx, FlavourEnvoy, good)
	require.NoError(t, err, "the last good set is served again")
}

func values(m map[string]Service) []Service {
	out := make([]Service, 0, len(m))
	for _, s := range m {
		out = append(out, s)
	}
	return out
}

// The Envoy route configuration's encoding, assembled from its virtual hosts' (a second
// copy of them), is shared while a response holds it and not kept after: once released it
// is gone from the cache's accounting, and the next response gets the same bytes again.
func TestEnvoyRouteEncodingIsKeptOnlyWhileHeld(t *testing.T) {
	ctx := context.Background()
	fleet := encFleet(t, "ns", 20, []string{"worker-a", "worker-b"})
	tr := NewTranslator(DefaultEnvoyOptions)
	tr.Update(fleet, nil)
	held, err := tr.Resources(FlavourEnvoy)
	require.NoError(t, err)
	srv := NewServer(ServerConfig{})
	_, err = srv.SetResources(ctx, FlavourEnvoy, held)
	require.NoError(t, err)
	c := srv.cache.cache(string(FlavourEnvoy), resource.RouteType)
	encode := func() *anypb.Any {
		c.mu.Lock()
		defer c.mu.Unlock()
		require.Len(t, c.resources, 1)
		for _, e := range c.resources {
			require.NotNil(t, e.src, "the route configuration is held as its virtual hosts")
			r, err := c.enc.encoded(e)
			require.NoError(t, err)
			return r
		}
		return nil
	}
	first := encode()
	assert.Same(t, first, encode(), "shared while a response holds it")
	_, encoded := c.size()
	assert.Equal(t, len(first.GetValue()), encoded, "counted while held")
	want := string(first.GetValue())
	first = nil
	runtime.GC()
	_, encoded = c.size()
	assert.Zero(t, encoded, "not kept once released")
	assert.Equal(t, want, string(encode().GetValue()), "made again, the same bytes")
}
