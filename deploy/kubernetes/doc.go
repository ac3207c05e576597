// Package kubernetes holds no code: its directory is stockflow's kustomize base for Kubernetes, and its
// tests render that base and hold every object to its API type and to the worker's settings. It is a Go
// module of its own, so that k8s.io/* stays out of the product's go.mod.
package kubernetes
