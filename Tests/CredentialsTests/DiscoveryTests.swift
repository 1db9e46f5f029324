import Foundation
import Testing
import TokenAgent

@Suite("Host credentials discovery")
struct DiscoveryTests {
    @Test func environmentVariableComesFirst() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let named = try directory.write("named.json", TestKeys.serviceAccount())
        try directory.write("creds/\(HostCredentials.systemdCredentialName)", TestKeys.authorizedUser())
        try directory.write("gcloud/\(HostCredentials.gcloudFileName)", TestKeys.authorizedUser())
        let environment = [
            "GOOGLE_APPLICATION_CREDENTIALS": named, "CREDENTIALS_DIRECTORY": directory.path + "/creds",
            "CLOUDSDK_CONFIG": directory.path + "/gcloud", "GCE_METADATA_HOST": "127.0.0.1:1",
        ]
        #expect(
            HostCredentials.locate(environment: environment)
                == .file(path: named, via: "GOOGLE_APPLICATION_CREDENTIALS")
        )
        let source = try HostCredentials.discover(environment: environment)
        #expect(source.summary.contains("service_account svc@project.iam.gserviceaccount.com key kid-1"))
        #expect(source.summary.contains(named))
        #expect(source.quotaProject == nil)
    }

    @Test func environmentVariableNamingAMissingFileIsAStartUpError() {
        let error = configurationError { () throws(ConfigurationError) in
            try HostCredentials.discover(environment: ["GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"])
        }
        #expect(error?.key == "credentials")
        #expect(error?.reason.contains("GOOGLE_APPLICATION_CREDENTIALS") == true)
        #expect(error?.reason.contains("/nonexistent/key.json") == true)
    }

    @Test func emptyEnvironmentVariableIsUnset() {
        #expect(
            HostCredentials.locate(environment: ["GOOGLE_APPLICATION_CREDENTIALS": "", "HOME": "/nonexistent"])
                == .metadataServer(host: "metadata.google.internal")
        )
    }

    @Test func systemdCredentialWhenPresent() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let credential = try directory.write(
            "creds/\(HostCredentials.systemdCredentialName)",
            TestKeys.authorizedUser(quotaProject: "billing-project")
        )
        try directory.write("gcloud/\(HostCredentials.gcloudFileName)", TestKeys.serviceAccount())
        let environment = [
            "CREDENTIALS_DIRECTORY": directory.path + "/creds", "CLOUDSDK_CONFIG": directory.path + "/gcloud",
        ]
        #expect(HostCredentials.locate(environment: environment) == .file(path: credential, via: "systemd credential"))
        let source = try HostCredentials.discover(environment: environment)
        #expect(source.quotaProject == "billing-project")
        #expect(source.summary.contains("authorized_user client cid.apps.googleusercontent.com"))
        #expect(!source.summary.contains("secret"))
        // A credentials directory without the credential falls through to gcloud's file.
        let other = ["CREDENTIALS_DIRECTORY": directory.path, "CLOUDSDK_CONFIG": directory.path + "/gcloud"]
        #expect(
            HostCredentials.locate(environment: other)
                == .file(
                    path: directory.path + "/gcloud/" + HostCredentials.gcloudFileName,
                    via: "gcloud application-default"
                )
        )
    }

    @Test func gcloudFileUnderCloudSDKConfigThenHome() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let underConfig = try directory.write("sdk/\(HostCredentials.gcloudFileName)", TestKeys.authorizedUser())
        let underHome = try directory.write(
            "home/.config/gcloud/\(HostCredentials.gcloudFileName)",
            TestKeys.authorizedUser()
        )
        let home = directory.path + "/home"
        #expect(
            HostCredentials.locate(environment: ["CLOUDSDK_CONFIG": directory.path + "/sdk", "HOME": home])
                == .file(path: underConfig, via: "gcloud application-default")
        )
        #expect(
            HostCredentials.locate(environment: ["HOME": home])
                == .file(path: underHome, via: "gcloud application-default")
        )
        // CLOUDSDK_CONFIG set to a directory without the file: the metadata server, not $HOME.
        #expect(
            HostCredentials.locate(environment: ["CLOUDSDK_CONFIG": directory.path, "HOME": home])
                == .metadataServer(host: "metadata.google.internal")
        )
    }

    @Test func metadataServerLast() throws {
        #expect(HostCredentials.locate(environment: [:]) == .metadataServer(host: "metadata.google.internal"))
        let environment = ["GCE_METADATA_HOST": "127.0.0.1:8080", "HOME": "/nonexistent"]
        #expect(HostCredentials.locate(environment: environment) == .metadataServer(host: "127.0.0.1:8080"))
        // Nothing is asked at start-up: nothing listens on port 1, and discovery still succeeds.
        let source = try HostCredentials.discover(environment: ["GCE_METADATA_HOST": "127.0.0.1:1", "HOME": "/none"])
        #expect(source.summary == "metadata server 127.0.0.1:1")
        for host in ["metadata.google.internal", "169.254.169.254", "localhost:8080", "[::1]:8080"] {
            _ = try HostCredentials.source(for: .metadataServer(host: host))
        }
    }

    @Test(arguments: ["10.1.2.3:80", "metadata.example.com", "127.0.0.1/path", "user@127.0.0.1", "a b"])
    func metadataHostMustBeLoopbackOrTheMetadataServer(host: String) {
        let error = configurationError { () throws(ConfigurationError) in
            try HostCredentials.source(for: .metadataServer(host: host))
        }
        #expect(error?.key == "credentials")
        #expect(error?.reason.contains("GCE_METADATA_HOST") == true)
    }
}
