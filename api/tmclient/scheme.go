package tmclient

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	omev1beta1 "github.com/trafficmap/publisher/api/v1beta1"
)

var (
	// Scheme holds the ome.io/v1beta1 types and the unversioned metav1
	// types. Treat it as read-only; it is shared by every Clientset.
	Scheme = runtime.NewScheme()

	// Codecs encodes and decodes the types in Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)

	// ParameterCodec encodes metav1 option structs as query parameters.
	ParameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(omev1beta1.AddToScheme(Scheme))
}
