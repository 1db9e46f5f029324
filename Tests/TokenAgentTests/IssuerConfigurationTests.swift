import Foundation
import Testing
import TokenAgent

@Suite("Issuers: configuration")
struct IssuerConfigurationTests {
    @Test func theIssuesExampleParses() throws {
        let configuration = try parseConfiguration(
            #"{"issuers": {"vehicle": {"service_account": "driver-signer@proj.iam.gserviceaccount.com"},"#
                + #" "trip": {"key_file": "consumer-key.json", "lifetime": 1800, "signs_per_minute": 120}}}"#
        )
        try configuration.validate()
        #expect(configuration.issuers["vehicle"]?.serviceAccount == "driver-signer@proj.iam.gserviceaccount.com")
        #expect(configuration.issuers["trip"]?.keyFile == "consumer-key.json")
        #expect(configuration.issuers["trip"]?.lifetime == 1800)
        #expect(configuration.issuers["trip"]?.signsPerMinute == 120)
        #expect(configuration.iamEndpoint == "https://iamcredentials.googleapis.com")
        #expect(!configuration.usesDemoIssuer)
        #expect(configuration.needsHostCredentials)
        #expect(configuration.configuredKinds == ["vehicle", "trip"])
    }

    @Test func issuerKeyStaysTheDefaultOfTheOtherWellKnownKinds() throws {
        let configuration = try parseConfiguration(
            #"{"issuer_key": "/k.json", "issuers": {"vehicle": {"key_file": "/v.json"}}}"#
        )
        try configuration.validate()
        #expect(configuration.configuredKinds == Set(FleetEngineKinds.all))
        #expect(!configuration.needsHostCredentials)
    }

    @Test func eachMistakeIsNamedByItsKey() {
        let cases: [(String, String)] = [
            (#"{"issuers": {"vehicle": {}}}"#, "issuers.vehicle"),
            (
                #"{"issuers": {"vehicle": {"key_file": "/k", "service_account": "a@b.iam.gserviceaccount.com"}}}"#,
                "issuers.vehicle"
            ),
            (#"{"issuers": {"vehicle": {"key_file": "/k", "scope": "x"}}}"#, "issuers.vehicle.scope"),
            (#"{"issuers": {"vehicle": {"service_account": "not-an-email"}}}"#, "issuers.vehicle.service_account"),
            (#"{"issuers": {"vehicle": {"service_account": "a/../b@c.iam"}}}"#, "issuers.vehicle.service_account"),
            (#"{"issuers": {"vehicle": {"key_file": "/k", "lifetime": 3601}}}"#, "issuers.vehicle.lifetime"),
            (#"{"issuers": {"vehicle": {"key_file": "/k", "lifetime": 59}}}"#, "issuers.vehicle.lifetime"),
            (
                #"{"issuers": {"vehicle": {"key_file": "/k", "signs_per_minute": 0}}}"#,
                "issuers.vehicle.signs_per_minute"
            ),
            (
                #"{"issuers": {"vehicle": {"key_file": "/k", "signs_per_minute": 1.5}}}"#,
                "issuers.vehicle.signs_per_minute"
            ),
            (#"{"issuers": {"courier": {"key_file": "/k"}}}"#, "issuers.courier.claim"),
            (#"{"issuers": {"courier": {"key_file": "/k", "claim": "Bad-Claim"}}}"#, "issuers.courier.claim"),
            (#"{"issuers": {"Vehicle": {"key_file": "/k"}}}"#, "issuers.Vehicle"),
            (
                #"{"issuers": {"server": {"key_file": "/k", "claim": "vehicleid"}}, "allow": {"server": {"users": [0]}}}"#,
                "issuers.server.claim"
            ),
            (
                #"{"providers": {"vehicle": {"url": "https://p/{id}"}}, "issuers": {"vehicle": {"key_file": "/k"}}}"#,
                "issuers.vehicle"
            ),
            (#"{"providers": {"server": {"url": "https://p/{id}"}}}"#, "providers.server"),
            (#"{"issuers": {"server": {"key_file": "/k"}}}"#, "allow.server"),
            (
                #"{"issuers": {"fleet-reader": {"service_account": "r@p.iam.gserviceaccount.com"}}}"#,
                "allow.fleet-reader"
            ),
            (
                #"{"issuers": {"vehicle": {"key_file": "/k"}}, "iam_endpoint": "http://iam.example.com"}"#,
                "iam_endpoint"
            ),
            (#"{"issuers": {"vehicle": {"key_file": "/k"}}, "iam_endpoint": "ftp://127.0.0.1"}"#, "iam_endpoint"),
            (#"{"issuers": {"vehicle": {"key_file": "/k"}}, "iam_endpoint": "https://iam.example/?"}"#, "iam_endpoint"),
            (
                #"{"issuers": {"vehicle": {"key_file": "/k"}}, "iam_endpoint": "https://iam.example?x="}"#,
                "iam_endpoint"
            ),
            (#"{"issuers": {"vehicle": {"key_file": "/k"}}, "iam_endpoint": "https://iam.example#f"}"#, "iam_endpoint"),
            (#"{"iam_endpoint": "https://u:p@iam.example"}"#, "iam_endpoint"),
        ]
        for (json, key) in cases {
            #expect(configurationProblem(json)?.key == key, "\(json)")
        }
    }

    @Test func wildcardKindsNeedAnAllowEntryAndThenStart() {
        for kind in ["server", "delivery-server", "fleet-reader", "delivery-fleet-reader"] {
            #expect(configurationProblem(#"{"issuers": {"\#(kind)": {"key_file": "/k"}}}"#)?.key == "allow.\(kind)")
            #expect(
                configurationProblem(
                    #"{"issuers": {"\#(kind)": {"key_file": "/k"}}, "allow": {"\#(kind)": {"users": [1000]}}}"#
                )
                    == nil
            )
        }
    }

    @Test func customKindsWithAClaimAndLoopbackEndpointsAreFine() {
        #expect(
            configurationProblem(#"{"issuers": {"trusted-driver": {"key_file": "/k", "claim": "deliveryvehicleid"}}}"#)
                == nil
        )
        for endpoint in ["http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:9", "https://iam.example.com"] {
            #expect(
                configurationProblem(#"{"issuers": {"vehicle": {"key_file": "/k"}}, "iam_endpoint": "\#(endpoint)"}"#)
                    == nil
            )
        }
    }

    @Test func relativeKeyFilesAreSystemdCredentials() throws {
        let configuration = try parseConfiguration(
            #"{"issuers": {"trip": {"key_file": "consumer-key.json"}, "task": {"key_file": "/abs.json"}}}"#
        )
        let resolved = configuration.resolvingCredentials(environment: ["CREDENTIALS_DIRECTORY": "/run/credentials/x"])
        #expect(resolved.issuers["trip"]?.keyFile == "/run/credentials/x/consumer-key.json")
        #expect(resolved.issuers["task"]?.keyFile == "/abs.json")
    }

    @Test func theConfigFileKeysListIssuers() {
        #expect(ConfigurationFile.topLevelKeys.contains("issuers"))
        #expect(ConfigurationFile.topLevelKeys.contains("iam_endpoint"))
        #expect(
            ConfigurationFile.issuerKeys == ["key_file", "service_account", "lifetime", "claim", "signs_per_minute"]
        )
    }
}
