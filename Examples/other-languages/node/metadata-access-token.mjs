// An access token from fleet-tokend's GCE metadata endpoint, through Google's own auth library for
// Node.js (google-auth-library) as it is: the worker's code is what it would be on Compute Engine,
// only its environment names the agent's endpoint (README, "From other languages";
// docs/OPERATIONS.md, "The GCE metadata endpoint"):
//
//   npm install google-auth-library
//   GCE_METADATA_HOST=127.0.0.1:8989 GCE_METADATA_IP=127.0.0.1:8989 NO_PROXY=127.0.0.1,localhost \
//       node metadata-access-token.mjs
//
// Not run by the test suite (it needs google-auth-library from npm).

import { GoogleAuth } from "google-auth-library";

const auth = new GoogleAuth({ scopes: ["https://www.googleapis.com/auth/cloud-platform"] });
const client = await auth.getClient(); // finds "Compute Engine": the agent's endpoint
// The client caches the token and asks again ahead of its expiry; Google's client libraries take
// `auth` as it is.
const { token } = await client.getAccessToken();
console.log(`${await auth.getProjectId()}: an access token of ${token.length} characters`);
