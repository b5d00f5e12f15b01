package model

import (
	"k8s.io/apimachinery/pkg/types"
)

// The one key type of objects across packages is types.NamespacedName; its String() is
// "namespace/name", the informer caches' key format.

// KeyOf is the key of a namespaced object.
func KeyOf(obj interface {
	GetNamespace() string
	GetName() string
}) types.NamespacedName {
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// Key is the key of namespace/name.
func Key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
