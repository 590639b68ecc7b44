// The Gateway API CRDs for the tests (tests/support/kube.rs, gateway_api_crds): scripts/test-peers
// gateway-api-crds copies the CRD manifests of sigs.k8s.io/gateway-api at the version required
// here (go get sigs.k8s.io/gateway-api@vX.Y.Z && go mod tidy moves it; v1.7.0 and later need
// Go 1.27). Nothing is built: tools.go imports one package so that go mod tidy keeps the
// requirement.
module haptor.test/tools/gateway-api

go 1.26.0

require sigs.k8s.io/gateway-api v1.6.3
