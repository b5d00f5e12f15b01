package drain

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const seedValue = `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`

var seedDrain = Request{Action: ActionDrain, ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}

func target(annotations map[string]string) Target {
	return Target{Namespace: "prod", Name: "chat", UID: "2f6c1d9e-4b7a-4c1e-9f3d-8a5b6c7d0e12",
		ResourceVersion: "1284711", Generation: 1, Placement: true, Annotations: annotations, PayloadBytes: 512}
}

func TestPatchShape(t *testing.T) {
	const guard = `{"metadata":{"uid":"2f6c1d9e-4b7a-4c1e-9f3d-8a5b6c7d0e12","resourceVersion":"1284711","annotations":{"ome.io/traffic-drain":`
	for _, tc := range []struct {
		name        string
		req         Request
		annotations map[string]string
		op          Op
		want        string
	}{
		{"drain with nil annotations", seedDrain, nil, OpAdd,
			guard + `"{\"maintenance-a\":{\"cluster\":\"worker-a\",\"reason\":\"planned maintenance\"}}"}}}`},
		{"drain next to other annotations sets the key only", seedDrain, map[string]string{"team": "a"}, OpAdd,
			guard + `"{\"maintenance-a\":{\"cluster\":\"worker-a\",\"reason\":\"planned maintenance\"}}"}}}`},
		{"drain next to another ID replaces and keeps it, sorted", Request{Action: ActionDrain, ID: "a-first", Cluster: "worker-b", Reason: `say "hi" <b> \ —`},
			map[string]string{Annotation: seedValue}, OpReplace,
			guard + `"{\"a-first\":{\"cluster\":\"worker-b\",\"reason\":\"say \\\"hi\\\" <b> \\\\ —\"},\"maintenance-a\":{\"cluster\":\"worker-a\",\"reason\":\"planned maintenance\"}}"}}}`},
		{"undrain of the last ID removes the key", Request{Action: ActionUndrain, ID: "maintenance-a"}, map[string]string{Annotation: seedValue, "team": "a"}, OpRemove,
			guard + `null}}}`},
		{"undrain of one of two keeps the other", Request{Action: ActionUndrain, ID: "maintenance-a"},
			map[string]string{Annotation: `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"},"z":{"cluster":"worker-b","reason":"r"}}`}, OpReplace,
			guard + `"{\"z\":{\"cluster\":\"worker-b\",\"reason\":\"r\"}}"}}}`},
		{"drain into {} replaces", seedDrain, map[string]string{Annotation: `{}`}, OpReplace,
			guard + `"{\"maintenance-a\":{\"cluster\":\"worker-a\",\"reason\":\"planned maintenance\"}}"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Prepare(tc.req, target(tc.annotations))
			require.NoError(t, err)
			assert.Equal(t, tc.op, p.Op)
			assert.Equal(t, tc.want, string(p.Patch()))
		})
	}
}

func TestPrepareCountsAndCluster(t *testing.T) {
	p, err := Prepare(seedDrain, target(nil))
	require.NoError(t, err)
	assert.Equal(t, [2]int{0, 1}, [2]int{p.Before, p.After})
	assert.Equal(t, "worker-a", p.Cluster)
	assert.Equal(t, seedValue, p.Value)

	p, err = Prepare(Request{Action: ActionUndrain, ID: "maintenance-a"}, target(map[string]string{Annotation: seedValue}))
	require.NoError(t, err)
	assert.Equal(t, [2]int{1, 0}, [2]int{p.Before, p.After})
	assert.Equal(t, "worker-a", p.Cluster, "undrain shows the removed drain's cluster")
}

func manyDrains(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"d%03d":{"cluster":"worker-a","reason":"r"}`, i)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestPrepareRefusals(t *testing.T) {
	undrain := Request{Action: ActionUndrain, ID: "maintenance-a"}
	with := func(change func(*Target)) Target {
		tg := target(map[string]string{"team": "a"})
		change(&tg)
		return tg
	}
	many := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		req    Request
		target Target
		want   error
	}{
		{"id already exists", seedDrain, target(map[string]string{Annotation: seedValue}), ErrIDExists},
		{"undrain with no annotation", undrain, target(nil), ErrIDMissing},
		{"undrain of an unknown id", Request{Action: ActionUndrain, ID: "other"}, target(map[string]string{Annotation: seedValue}), ErrIDMissing},
		{"malformed annotation", seedDrain, target(map[string]string{Annotation: `{"a":`}), ErrUnsafeAnnotation},
		{"malformed annotation on undrain", undrain, target(map[string]string{Annotation: `[]`}), ErrUnsafeAnnotation},
		{"empty annotation value", seedDrain, target(map[string]string{Annotation: ``}), ErrUnsafeAnnotation},
		{"existing entry with unsafe id", seedDrain, target(map[string]string{Annotation: `{"Bad_ID":{"cluster":"worker-a","reason":"r"}}`}), ErrUnsafeAnnotation},
		{"existing entry with unsafe cluster", seedDrain, target(map[string]string{Annotation: `{"a":{"cluster":"Worker A","reason":"r"}}`}), ErrUnsafeAnnotation},
		{"existing entry with a secret reason", seedDrain, target(map[string]string{Annotation: `{"a":{"cluster":"worker-a","reason":"sk-abcdefghijklmnopqrstuvwxyz"}}`}), ErrUnsafeAnnotation},
		{"64 drains, one more", Request{Action: ActionDrain, ID: "x", Cluster: "worker-a", Reason: "r"}, target(map[string]string{Annotation: manyDrains(64)}), ErrBounds},
		{"65 drains before", undrain, target(map[string]string{Annotation: manyDrains(65)}), ErrBounds},
		{"annotation over 32 KiB", undrain, target(map[string]string{Annotation: strings.Repeat(" ", MaxAnnotationBytes+1)}), ErrBounds},
		{"adding to 256 annotations", seedDrain, with(func(t *Target) { t.Annotations = many(256) }), ErrBounds},
		{"257 labels", seedDrain, with(func(t *Target) { t.Labels = many(257) }), ErrBounds},
		{"65 finalizers", seedDrain, with(func(t *Target) { t.Finalizers = make([]string, 65) }), ErrBounds},
		{"65 conditions", seedDrain, with(func(t *Target) { t.Conditions = 65 }), ErrBounds},
		{"4 components", seedDrain, with(func(t *Target) { t.Components = 4 }), ErrBounds},
		{"payload over 1 MiB", seedDrain, with(func(t *Target) { t.PayloadBytes = MaxPayloadBytes + 1 }), ErrBounds},
		{"metadata over 64 KiB", seedDrain, with(func(t *Target) { t.Labels = map[string]string{"big": strings.Repeat("x", MaxMetadataBytes)} }), ErrBounds},
		{"derived copy by label", seedDrain, with(func(t *Target) { t.Labels = map[string]string{"ome.io/placement-origin": "x"} }), ErrDerived},
		{"derived copy by annotation", seedDrain, with(func(t *Target) { t.Annotations["ome.io/placement-control-plane"] = "hub" }), ErrDerived},
		{"cluster-selector label", seedDrain, with(func(t *Target) { t.Labels = map[string]string{"ome.io/cluster-selector": "x"} }), ErrDerived},
		{"no placement", seedDrain, with(func(t *Target) { t.Placement = false }), ErrIneligible},
		{"no uid", seedDrain, with(func(t *Target) { t.UID = "" }), ErrIdentity},
		{"no resourceVersion", seedDrain, with(func(t *Target) { t.ResourceVersion = "" }), ErrIdentity},
		{"generation 0", seedDrain, with(func(t *Target) { t.Generation = 0 }), ErrIdentity},
		{"being deleted", seedDrain, with(func(t *Target) { t.Deleting = true }), ErrDeleting},
		{"bounds before derived", seedDrain, with(func(t *Target) { t.Components = 4; t.Placement = false }), ErrBounds},
		{"derived before malformed", seedDrain, with(func(t *Target) {
			t.Labels = map[string]string{"ome.io/placement-origin-uid": "x"}
			t.Annotations[Annotation] = "nope"
		}), ErrDerived},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Prepare(tc.req, tc.target)
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, p)
		})
	}
}

func TestPrepareObsoleteAnnotationIsEligible(t *testing.T) {
	tg := target(map[string]string{"ome.io/cluster-selector": "region=eu"})
	tg.Placement = false
	_, err := Prepare(seedDrain, tg)
	require.NoError(t, err)
}

func TestEncodeRoundTripsThroughTheParser(t *testing.T) {
	p, err := Prepare(Request{Action: ActionDrain, ID: "b", Cluster: "worker-b", Reason: `quote " and <tag> — ok`}, target(map[string]string{Annotation: seedValue}))
	require.NoError(t, err)
	got, err := ExistingDrains(p.Value)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "b", got[0].ID)
	assert.Equal(t, `quote " and <tag> — ok`, got[0].Reason)
}
