// An access token from fleet-tokend's GCE metadata endpoint, through Google's own auth library
// for Go (golang.org/x/oauth2/google) as it is: the worker's code is what it would be on Compute
// Engine, only its environment names the agent's endpoint (README, "From other languages";
// docs/OPERATIONS.md, "The GCE metadata endpoint"):
//
//	go mod tidy
//	GCE_METADATA_HOST=127.0.0.1:8989 NO_PROXY=127.0.0.1,localhost go run .
//
// Not run by the test suite, and not compiled: no Go toolchain on the machines it runs on.
package main

import (
	"context"
	"fmt"
	"log"

	"golang.org/x/oauth2/google"
)

func main() {
	ctx := context.Background()
	// Finds "Compute Engine": the agent's endpoint.
	credentials, err := google.FindDefaultCredentials(ctx, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		log.Fatal(err)
	}
	// The TokenSource caches the token and asks again ahead of its expiry; an oauth2.Client or a
	// Google client library takes it as it is.
	token, err := credentials.TokenSource.Token()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: an access token until %s\n", credentials.ProjectID, token.Expiry.UTC().Format("2006-01-02T15:04:05Z"))
}
