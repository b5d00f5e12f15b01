package model_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func xclaim(ns, name string, age int, names ...string) model.Claim {
	return model.Claim{Kind: model.KindTrafficMap, Namespace: ns, Name: name, Created: t0.Add(time.Duration(age) * time.Minute), Names: names}
}

// Whatever names the maps claim, the hostnames the plans keep translate into an Envoy route
// configuration without a duplicate domain or virtual host, and into gRPC listeners
// without a duplicate name: the snapshot passes Validate.
func TestOwnedNamesNeverDuplicate(t *testing.T) {
	labels := []string{"a", "b", "chat", "x"}
	domains := []string{"example.com", "b.example.com", "prod"}
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "c1", Endpoint: "https://c1.example.com", Weight: 1}}})
	require.NoError(t, err)
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var claims []model.Claim
		for i := range 2 + rng.IntN(8) {
			ns := []string{"prod", "staging", "x"}[rng.IntN(3)]
			svc := labels[rng.IntN(len(labels))]
			host := labels[rng.IntN(len(labels))] + "." + domains[rng.IntN(len(domains))]
			if rng.IntN(4) == 0 {
				host = "*." + domains[rng.IntN(len(domains))]
			}
			c := xclaim(ns, fmt.Sprintf("m%d", i), rng.IntN(3), svc+"."+ns)
			if (model.ClaimPolicy{GRPCNames: true}).Check(ns, host) == nil {
				c.Names = append(c.Names, host)
			}
			// Any journal: a race or a restore may have journaled overlapping names, and a
			// name no longer claimed may still be in it.
			for _, n := range append(slices.Clone(c.Names), labels[rng.IntN(len(labels))]+"."+domains[rng.IntN(len(domains))]) {
				if rng.IntN(2) == 0 {
					c.Journaled = append(c.Journaled, n)
				}
			}
			claims = append(claims, c)
		}
		var services []xds.Service
		var withHosts []xds.Service
		for _, c := range claims {
			own := model.ResolveHostnames(c, claims)
			svc := xds.Service{Namespace: c.Namespace, Name: c.Name, Service: strings.TrimSuffix(c.Names[0], "."+c.Namespace), Result: res}
			for _, n := range own.Owned {
				if len(c.Names) > 1 && n == c.Names[1] {
					svc.Hostnames = []string{n}
				}
			}
			for _, cf := range own.Conflicts {
				svc.Withheld = append(svc.Withheld, cf.Hostname)
			}
			svc.Withheld = append(svc.Withheld, own.Claimable...) // served once journaled
			services = append(services, svc)
			if len(svc.Hostnames) > 0 {
				withHosts = append(withHosts, svc)
			}
		}
		envoy, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, withHosts)
		require.NoError(t, err)
		seen := map[string]string{}
		for _, vh := range envoy.Routes[0].VirtualHosts {
			for _, d := range vh.Domains {
				require.NotContains(t, seen, d, "seed %d: domain %s of %s is also %s's (claims %+v)", seed, d, vh.Name, seen[d], claims)
				seen[d] = vh.Name
			}
		}
		require.NoError(t, xds.Validate(envoy), "seed %d", seed)
		grpc, err := xds.TranslateGRPC(services)
		require.NoError(t, err)
		require.NoError(t, xds.Validate(grpc), "seed %d: claims %+v", seed, claims)
	}
}
