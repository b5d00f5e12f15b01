package httproute_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/httproute"
)

func TestAdoptionOf(t *testing.T) {
	src := httproute.Source{Namespace: "prod", Name: "chat", Service: "chat"}
	ours := map[string]string{httproute.LabelManagedBy: httproute.ManagedByValue, httproute.LabelSourceNamespace: "prod", httproute.LabelSourceName: "chat"}
	ome := map[string]string{httproute.LabelOMEManagedBy: httproute.OMEManagedByValue, httproute.LabelOMESourceName: "chat", httproute.LabelOMESourceNS: "prod"}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	with := func(m map[string]string, k, v string) map[string]string { return merge(m, map[string]string{k: v}) }
	tests := []struct {
		name    string
		labels  map[string]string
		fromOME bool
		want    httproute.Adoption
	}{
		{name: "ours", labels: ours, want: httproute.AdoptOwned},
		{name: "ours, adoption on", labels: ours, fromOME: true, want: httproute.AdoptOwned},
		{name: "no labels", labels: nil, fromOME: true, want: httproute.AdoptNone},
		{name: "ome's for the map, adoption off: a conflict", labels: ome, want: httproute.AdoptNone},
		{name: "ome's for the map, adoption on", labels: ome, fromOME: true, want: httproute.AdoptOME},
		{name: "ome's with extra labels", labels: with(ome, "team", "a"), fromOME: true, want: httproute.AdoptOME},
		{name: "ome's for another inferenceservice", labels: with(ome, httproute.LabelOMESourceName, "other"), fromOME: true, want: httproute.AdoptNone},
		{name: "ome's for another namespace", labels: with(ome, httproute.LabelOMESourceNS, "staging"), fromOME: true, want: httproute.AdoptNone},
		{name: "ome's managed-by missing", labels: with(ome, httproute.LabelOMEManagedBy, ""), fromOME: true, want: httproute.AdoptNone},
		{name: "ome's managed-by another value", labels: with(ome, httproute.LabelOMEManagedBy, "someone"), fromOME: true, want: httproute.AdoptNone},
		{name: "adoption cut short: ours and ome's", labels: merge(ours, ome), fromOME: true, want: httproute.AdoptOME},
		{name: "adoption cut short, adoption off: ours", labels: merge(ours, ome), want: httproute.AdoptOwned},
		{name: "ome's labels on our route of another map", labels: merge(with(ours, httproute.LabelSourceName, "other"), ome), fromOME: true, want: httproute.AdoptNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, httproute.AdoptionOf(tc.labels, src, tc.fromOME))
		})
	}
	// OME names objects by the InferenceService, which has the map's name.
	assert.Equal(t, httproute.AdoptNone, httproute.AdoptionOf(ome, httproute.Source{Namespace: "prod", Name: "chat", Service: "other"}, true))
	assert.Equal(t, httproute.AdoptOME, httproute.AdoptionOf(ome, httproute.Source{Namespace: "prod", Name: "chat"}, true))
}
