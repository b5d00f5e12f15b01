package v1beta1_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	omev1beta1 "github.com/trafficmap/publisher/api/v1beta1"
)

// The generated TrafficMap CRD and the hand-written stand-in InferenceService CRD.
const (
	crdDir     = "../../config/crd"
	standInDir = "../../integration/testdata/crds"
)

func loadCRD(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(data, &crd))
	return &crd
}

// prop walks a schema through the named properties; "[]" steps into array items.
func prop(t *testing.T, s *apiextensionsv1.JSONSchemaProps, path ...string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	for _, p := range path {
		if p == "[]" {
			require.NotNil(t, s.Items, "no items at %v", path)
			s = s.Items.Schema
			continue
		}
		next, ok := s.Properties[p]
		require.True(t, ok, "no property %q in %v", p, path)
		s = &next
	}
	return s
}

func TestTrafficMapCRD(t *testing.T) {
	crd := loadCRD(t, filepath.Join(crdDir, "ome.io_trafficmaps.yaml"))

	assert.Equal(t, "trafficmaps.ome.io", crd.Name)
	assert.Equal(t, omev1beta1.GroupName, crd.Spec.Group)
	assert.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope)
	assert.Equal(t, "TrafficMap", crd.Spec.Names.Kind)
	assert.Equal(t, "trafficmaps", crd.Spec.Names.Plural)
	assert.Equal(t, []string{"tm", "tmap"}, crd.Spec.Names.ShortNames)
	require.Len(t, crd.Spec.Versions, 1)

	v := crd.Spec.Versions[0]
	assert.Equal(t, "v1beta1", v.Name)
	assert.True(t, v.Served)
	assert.True(t, v.Storage)
	require.NotNil(t, v.Subresources)
	assert.NotNil(t, v.Subresources.Status)

	type column struct{ name, typ, path string }
	var got []column
	for _, c := range v.AdditionalPrinterColumns {
		got = append(got, column{c.Name, c.Type, c.JSONPath})
	}
	assert.Equal(t, []column{
		{"Mode", "string", ".spec.mode"},
		{"Published", "string", `.status.conditions[?(@.type=="Published")].status`},
		{"Routable", "string", `.status.conditions[?(@.type=="Routable")].status`},
		{"Override", "string", `.status.conditions[?(@.type=="OverrideActive")].status`},
		{"Reason", "string", `.status.conditions[?(@.type=="Routable")].reason`},
		{"Age", "date", ".metadata.creationTimestamp"},
	}, got)

	root := v.Schema.OpenAPIV3Schema
	spec := prop(t, root, "spec")
	assert.Equal(t, []string{"service"}, spec.Required)

	entries := prop(t, spec, "entries")
	assert.Equal(t, "map", *entries.XListType)
	assert.Equal(t, []string{"cluster"}, entries.XListMapKeys)
	entry := prop(t, entries, "[]")
	assert.ElementsMatch(t, []string{"cluster", "weight"}, entry.Required)

	weight := prop(t, entry, "weight")
	assert.InDelta(t, 0, *weight.Minimum, 0)
	assert.InDelta(t, 1_000_000, *weight.Maximum, 0)

	assert.Equal(t, "set", *prop(t, entry, "drainRefs").XListType)
	assert.Nil(t, prop(t, entry, "capacity", "factor").Default, "factor must have no default")
	source := prop(t, entry, "capacity", "source")
	require.NotNil(t, source.Default)
	assert.JSONEq(t, `"ControlPlane"`, string(source.Default.Raw))
	assert.InDelta(t, 0, *prop(t, entry, "capacity", "reported").Minimum, 0)

	const sha256Pattern = `^sha256:[0-9a-f]{64}$`
	assert.Equal(t, sha256Pattern, prop(t, entry, "probe", "policyDigest").Pattern)

	status := prop(t, root, "status")
	conditions := prop(t, status, "conditions")
	assert.Equal(t, "map", *conditions.XListType)
	assert.Equal(t, []string{"type"}, conditions.XListMapKeys)
	_, programmed := status.Properties["programmed"]
	assert.False(t, programmed, "status.programmed was renamed published")

	publisher := prop(t, status, "publisher")
	assert.Nil(t, publisher.Default)
	assert.Equal(t, []string{"publisherName"}, publisher.Required)
	name := prop(t, publisher, "publisherName")
	assert.EqualValues(t, 1, *name.MinLength)
	assert.EqualValues(t, omev1beta1.MaxTrafficMapPublisherNameLength, *name.MaxLength)
	claimed := prop(t, publisher, "claimedTargets")
	assert.Equal(t, "set", *claimed.XListType)
	assert.EqualValues(t, 1, *claimed.MinItems)
	assert.EqualValues(t, omev1beta1.MaxTrafficMapPublisherTargets, *claimed.MaxItems)
	assert.EqualValues(t, omev1beta1.MaxTrafficMapPublisherTargetLength, *prop(t, claimed, "[]").MaxLength)
	assert.Equal(t, sha256Pattern, prop(t, publisher, "observedOptionsDigest").Pattern)

	last := prop(t, publisher, "lastPositive")
	assert.ElementsMatch(t, []string{"trafficMapGeneration", "observedISVCGeneration", "planCompatibilityDigest", "targets"}, last.Required)
	assert.Equal(t, sha256Pattern, prop(t, last, "planCompatibilityDigest").Pattern)
	targets := prop(t, last, "targets")
	assert.Equal(t, "map", *targets.XListType)
	assert.Equal(t, []string{"target"}, targets.XListMapKeys)
	assert.EqualValues(t, omev1beta1.MaxTrafficMapPublisherTargets, *targets.MaxItems)
	targetWeight := prop(t, targets, "[]", "weight")
	assert.InDelta(t, 0, *targetWeight.Minimum, 0)
	assert.Nil(t, targetWeight.Maximum, "lastPositive target weight deliberately has no maximum")
}

func TestInferenceServiceStandInCRD(t *testing.T) {
	crd := loadCRD(t, filepath.Join(standInDir, "ome.io_inferenceservices.yaml"))

	assert.Equal(t, "inferenceservices.ome.io", crd.Name)
	assert.Equal(t, omev1beta1.InferenceServicesResource.Resource, crd.Spec.Names.Plural)
	assert.Equal(t, "InferenceService", crd.Spec.Names.Kind)
	assert.Equal(t, []string{"isvc"}, crd.Spec.Names.ShortNames)
	assert.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope)
	require.Len(t, crd.Spec.Versions, 1)
	v := crd.Spec.Versions[0]
	assert.Equal(t, omev1beta1.InferenceServicesResource.Version, v.Name)
	require.NotNil(t, v.Subresources)
	assert.NotNil(t, v.Subresources.Status)
	for _, field := range []string{"spec", "status"} {
		s := prop(t, v.Schema.OpenAPIV3Schema, field)
		assert.Equal(t, "object", s.Type, field)
		require.NotNil(t, s.XPreserveUnknownFields, field)
		assert.True(t, *s.XPreserveUnknownFields, field)
	}
}
