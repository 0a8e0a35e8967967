package v1alpha1

import (
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

var (
	// GroupVersion is the group and version of the experimental kinds: the
	// same as the stable ones, so that graduating a kind changes no API.
	GroupVersion = infrav1.GroupVersion

	// schemeBuilder collects the kinds registered by each type file's init.
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the experimental types to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)
