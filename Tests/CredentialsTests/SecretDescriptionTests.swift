import Foundation
import Testing

@testable import TokenAgent

/// No credentials type prints a secret, however it is printed (`"\(x)"`, `String(reflecting:)`):
/// a log line or an error that shows one names the file and the account, never the key, the client
/// secret, the refresh token or an access token.
@Suite("Secrets stay out of descriptions")
struct SecretDescriptionTests {
    @Test func credentialsAndGrantsDescribeThemselvesWithoutSecrets() throws {
        let secrets = ["very-secret", "1//refresh-secret", "PRIVATE KEY", "ya29.secret-access"]
        let user = try CredentialsFile.parse(TestKeys.authorizedUser(quotaProject: "p"), path: "/etc/adc.json")
        let account = try CredentialsFile.parse(TestKeys.serviceAccount(), path: "/etc/key.json")
        let federated = try CredentialsFile.parse(
            FederationFileTests.file(
                source: ["file": "/t"],
                extra: ["client_id": "c-1", "client_secret": "very-secret"]
            ),
            path: "/etc/wif.json"
        )
        var printed: [String] = []
        for file in [user, account, federated] {
            printed += ["\(file)", String(reflecting: file)]
            switch file {
            case .serviceAccount(let credentials):
                let grant = AccessTokenGrant.serviceAccount(credentials)
                printed += ["\(credentials)", String(reflecting: credentials), "\(grant)", String(reflecting: grant)]
            case .authorizedUser(let credentials):
                let grant = AccessTokenGrant.authorizedUser(credentials)
                printed += ["\(credentials)", String(reflecting: credentials), "\(grant)", String(reflecting: grant)]
            case .externalAccount(let credentials):
                let grant = AccessTokenGrant.externalAccount(
                    ExternalAccountExchange(account: credentials, environment: [:], clock: SystemAgentClock())
                )
                printed += ["\(credentials)", String(reflecting: credentials), "\(grant)", String(reflecting: grant)]
                printed += ["\(credentials.client!)", String(reflecting: credentials.client!)]
            }
        }
        let fetched = FetchedAccessToken(value: "ya29.secret-access", lifetime: 3600)
        printed += ["\(fetched)", String(reflecting: fetched)]
        for text in printed {
            for secret in secrets { #expect(!text.contains(secret), "\(text)") }
        }
        #expect(printed.contains("authorized_user client cid.apps.googleusercontent.com (/etc/adc.json)"))
        #expect(printed.contains("service_account svc@project.iam.gserviceaccount.com key kid-1 (/etc/key.json)"))
    }
}
