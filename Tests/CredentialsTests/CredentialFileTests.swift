import Foundation
import TestSupport
import Testing
import TokenAgent

@Suite("Credentials files")
struct CredentialFileTests {
    /// The configuration error of making a source from a file holding `data`.
    private func error(for data: Data) throws -> ConfigurationError? {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = try directory.write("adc.json", data)
        return configurationError { () throws(ConfigurationError) in
            try HostCredentials.source(for: .file(path: path, via: "GOOGLE_APPLICATION_CREDENTIALS"))
        }
    }

    @Test func serviceAccountAndAuthorizedUserAreRead() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let key = try directory.write("key.json", TestKeys.serviceAccount(tokenURI: nil))
        let account = try HostCredentials.source(for: .file(path: key, via: "test"))
        #expect(account.summary == "service_account svc@project.iam.gserviceaccount.com key kid-1 (test file \(key))")
        let user = try directory.write("user.json", TestKeys.authorizedUser(quotaProject: "q-1"))
        let source = try HostCredentials.source(for: .file(path: user, via: "test"))
        #expect(source.quotaProject == "q-1")
        #expect(source.summary.contains("quota project q-1"))
        #expect(!source.summary.contains("refresh-secret") && !source.summary.contains("very-secret"))
    }

    @Test(arguments: [
        "impersonated_service_account", "external_account_authorized_user", "something_new",
    ])
    func unsupportedTypesAreRefusedWithWhatToUseInstead(type: String) throws {
        let error = try #require(try error(for: TestKeys.serviceAccount(type: type)))
        #expect(error.key == "credentials")
        #expect(error.reason.contains("\"\(type)\""))
        #expect(error.reason.contains("adc.json"))
        #expect(error.reason.contains("key_file"))
        #expect(error.reason.contains("HTTP token provider"))
    }

    @Test func missingTypeOrNotJSONIsRefused() throws {
        let noType = try #require(try error(for: Data(#"{"client_email": "a@b"}"#.utf8)))
        #expect(noType.reason.contains("no \"type\""))
        #expect(noType.reason.contains("key_file"))
        let notJSON = try #require(try error(for: Data("not json".utf8)))
        #expect(notJSON.reason.contains("not a JSON object"))
        let numberType = try #require(try error(for: Data(#"{"type": 3}"#.utf8)))
        #expect(numberType.reason.contains("type is not a string"))
        let twice = try #require(
            try error(for: Data(#"{"type": "authorized_user", "type": "service_account"}"#.utf8))
        )
        #expect(twice.reason.contains("type appears twice"))
    }

    @Test(arguments: ["client_email", "private_key", "private_key_id"])
    func serviceAccountFieldsAreRequired(field: String) throws {
        let error = try #require(try error(for: TestKeys.serviceAccount(dropping: field)))
        #expect(error.reason.contains("lacks \(field)"))
    }

    @Test func privateKeyMustBeRSAPEM() throws {
        let data = Data(
            #"{"type":"service_account","client_email":"a@b","private_key_id":"k","private_key":"nope"}"#.utf8
        )
        let error = try #require(try error(for: data))
        #expect(error.reason.contains("private_key is not an RSA private key"))
        #expect(!error.reason.contains("nope"))
    }

    @Test func tokenURIMustBeHTTPSUnlessLoopback() throws {
        let http = try #require(try error(for: TestKeys.serviceAccount(tokenURI: "http://oauth2.example.com/token")))
        #expect(http.reason.contains("token_uri"))
        #expect(http.reason.contains("https"))
        let user = try #require(try error(for: TestKeys.authorizedUser(tokenURI: "http://10.0.0.1/token")))
        #expect(user.reason.contains("token_uri"))
        #expect(try error(for: TestKeys.serviceAccount(tokenURI: "http://127.0.0.1:9/token")) == nil)
        #expect(try error(for: TestKeys.authorizedUser(tokenURI: "http://[::1]:9/token")) == nil)
    }

    @Test func tokenURIIsSchemeHostPortAndPathOnly() throws {
        for uri in ["https://oauth2.example.com/token?x=1", "https://oauth2.example.com/token#f"] {
            let error = try #require(try error(for: TestKeys.serviceAccount(tokenURI: uri)), "\(uri)")
            #expect(error.key == "credentials")
            #expect(error.reason.contains("token_uri"), "\(error.reason)")
        }
        let secret = try #require(try error(for: TestKeys.authorizedUser(tokenURI: "https://me:pa55word@o.example/t")))
        #expect(secret.reason.contains("user-info"), "\(secret.reason)")
        #expect(!secret.reason.contains("pa55word"), "\(secret.reason)")
    }

    @Test func aMetadataHostWithUserInfoIsRefusedWithoutItsPassword() {
        for host in ["user:pa55word@127.0.0.1:8080", "169.254.169.254?x", "169.254.169.254#f", "127.0.0.1/x"] {
            let error = configurationError { () throws(ConfigurationError) in
                try HostCredentials.source(for: .metadataServer(host: host))
            }
            #expect(error?.key == "credentials", "\(host)")
            #expect(error?.reason.contains("GCE_METADATA_HOST") == true, "\(host)")
            #expect(error?.reason.contains("pa55word") == false, "\(error?.reason ?? "accepted")")
        }
    }

    @Test func aQuotaProjectOrClientIDWithAControlCharacterIsRefusedAtStart() throws {
        for value in ["proj\r\nX-Injected: 1", "proj\n", "pro\u{0}j", "proj\u{7F}", "pro\tj"] {
            let quota = try #require(try error(for: TestKeys.authorizedUser(quotaProject: value)), "\(value)")
            #expect(quota.key == "credentials")
            #expect(quota.reason.contains("quota_project_id holds a control character"), "\(quota.reason)")
            var object = try #require(
                try JSONSerialization.jsonObject(with: TestKeys.authorizedUser()) as? [String: String]
            )
            object["client_id"] = "cid" + value
            let client = try #require(try error(for: try JSONSerialization.data(withJSONObject: object)))
            #expect(client.reason.contains("client_id holds a control character"), "\(client.reason)")
        }
        #expect(try error(for: TestKeys.authorizedUser(quotaProject: "my-project-1")) == nil)
    }

    @Test func aCredentialsFileOthersMayReadIsWarnedAboutOnce() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let log = CapturedLog()
        let open = try directory.write("open.json", TestKeys.authorizedUser())
        let closed = try directory.write("closed.json", TestKeys.authorizedUser())
        chmod(open, 0o644)
        chmod(closed, 0o600)
        for _ in 0..<2 {
            for path in [open, closed] {
                _ = try HostCredentials.source(
                    for: .file(path: path, via: "GOOGLE_APPLICATION_CREDENTIALS"),
                    logger: log.logger()
                )
            }
        }
        let warnings = log.lines.withLock { $0.filter { $0.contains("readable by group or others") } }
        #expect(warnings.count == 1, "\(log.text)")
        #expect(warnings.first?.contains("file=\(open)") == true, "\(warnings)")
        #expect(warnings.first?.contains("mode=0644") == true, "\(warnings)")
        // The mode changes (still open to the group): a new warning.
        chmod(open, 0o640)
        _ = try HostCredentials.source(
            for: .file(path: open, via: "GOOGLE_APPLICATION_CREDENTIALS"),
            logger: log.logger()
        )
        #expect(log.lines.withLock { $0.filter { $0.contains("mode=0640") }.count } == 1, "\(log.text)")
    }

    @Test func unreadableFileIsAnErrorNamingIt() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = try directory.write("locked.json", TestKeys.authorizedUser())
        try FileManager.default.setAttributes([.posixPermissions: 0], ofItemAtPath: path)
        let error = configurationError { () throws(ConfigurationError) in
            try HostCredentials.source(for: .file(path: path, via: "systemd credential"))
        }
        // Root reads any file: only check the message when the file really was unreadable.
        if getuid() != 0 {
            #expect(error?.reason == "systemd credential file \(path) cannot be read")
        }
    }
}
