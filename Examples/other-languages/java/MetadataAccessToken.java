// An access token from fleet-tokend's GCE metadata endpoint, through Google's own auth library for
// Java (com.google.auth:google-auth-library-oauth2-http) as it is: the worker's code is what it
// would be on Compute Engine, only its environment names the agent's endpoint (README, "From other
// languages"; docs/OPERATIONS.md, "The GCE metadata endpoint"):
//
//   GCE_METADATA_HOST=127.0.0.1:8989 NO_PROXY=127.0.0.1,localhost \
//       java -cp <google-auth-library-oauth2-http and its dependencies> MetadataAccessToken.java
//
// Not run by the test suite (it needs google-auth-library-oauth2-http from Maven Central).

import com.google.auth.oauth2.AccessToken;
import com.google.auth.oauth2.GoogleCredentials;
import java.io.IOException;

public final class MetadataAccessToken {
    public static void main(String[] arguments) throws IOException {
        // Finds "Compute Engine": the agent's endpoint.
        GoogleCredentials credentials = GoogleCredentials.getApplicationDefault();
        // The credentials cache the token and refresh it ahead of its expiry; Google's client
        // libraries take them as they are.
        credentials.refreshIfExpired();
        AccessToken token = credentials.getAccessToken();
        System.out.println("an access token until " + token.getExpirationTime().toInstant());
    }
}
