//go:build tools

// Package tools keeps sigs.k8s.io/gateway-api required in go.mod (go mod tidy drops a
// requirement no package imports); scripts/test-peers reads the module's config/crd/, it
// builds nothing from it. pkg/consts imports nothing, so go.sum stays small.
package tools

import _ "sigs.k8s.io/gateway-api/pkg/consts"
