import Foundation
import TestSupport
import Testing

@testable import TokenAgent

/// `external_account` files (Workload Identity Federation): what is read, and what is refused at
/// start with its reason.
@Suite("Federation: external_account files")
struct FederationFileTests {
    static let audience =
        "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/fleet-pool/providers/fleet-provider"
    static let impersonationURL =
        "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/signer@p.iam.gserviceaccount.com:generateAccessToken"

    /// An `external_account` file's JSON with `credential_source` and the fields given.
    static func file(
        source: [String: Any],
        type: String = "urn:ietf:params:oauth:token-type:jwt",
        extra: [String: Any] = [:]
    ) -> Data {
        var object: [String: Any] = [
            "type": "external_account", "audience": audience, "subject_token_type": type,
            "token_url": "https://sts.googleapis.com/v1/token", "credential_source": source,
            "service_account_impersonation_url": impersonationURL, "universe_domain": "googleapis.com",
        ]
        for (key, value) in extra { object[key] = value }
        return try! JSONSerialization.data(withJSONObject: object)
    }

    nonisolated(unsafe) static let awsSource: [String: Any] = [
        "environment_id": "aws1",
        "region_url": "http://169.254.169.254/latest/meta-data/placement/availability-zone",
        "url": "http://169.254.169.254/latest/meta-data/iam/security-credentials",
        "regional_cred_verification_url":
            "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15",
        "imdsv2_session_token_url": "http://169.254.169.254/latest/api/token",
    ]

    /// The file read, or its error's reason.
    private func read(_ data: Data, environment: [String: String] = [:]) -> Result<CredentialsFile, ConfigurationError>
    {
        do throws(ConfigurationError) {
            return .success(try CredentialsFile.parse(data, path: "/etc/wif.json", environment: environment))
        } catch {
            return .failure(error)
        }
    }

    private func reason(_ data: Data, environment: [String: String] = [:]) -> String? {
        if case .failure(let error) = read(data, environment: environment) { return error.reason }
        return nil
    }

    @Test func eachSourceIsReadWithItsSummary() throws {
        let sources: [(source: [String: Any], type: String, kind: String)] = [
            (["file": "/var/run/secrets/tokens/gcp"], "urn:ietf:params:oauth:token-type:jwt", "file"),
            (
                [
                    "url":
                        "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=api://x",
                    "headers": ["Metadata": "true"],
                    "format": ["type": "json", "subject_token_field_name": "access_token"],
                ], "urn:ietf:params:oauth:token-type:jwt", "url"
            ),
            (
                ["executable": ["command": "/usr/bin/get-token --audience x"]],
                "urn:ietf:params:oauth:token-type:id_token", "executable"
            ),
            (Self.awsSource, "urn:ietf:params:aws:token-type:aws4_request", "aws"),
        ]
        for (source, type, kind) in sources {
            let read = read(
                Self.file(source: source, type: type),
                environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
            )
            guard case .success(.externalAccount(let account)) = read else {
                Issue.record("\(kind): \(read)")
                continue
            }
            #expect(
                account.summary
                    == "external_account (\(kind)) via fleet-pool/fleet-provider, impersonating signer@p.iam.gserviceaccount.com"
            )
            #expect(account.impersonation?.lifetime == 3600)
        }
    }

    @Test func theFileSourceFormatsAndTheExecutableSettingsAreRead() throws {
        guard
            case .success(.externalAccount(let json)) = read(
                Self.file(source: ["file": "/t", "format": ["type": "json", "subject_token_field_name": "id_token"]])
            )
        else { throw Unexpected(#line) }
        guard case .file("/t", .json(field: "id_token")) = json.source else { throw Unexpected(#line) }
        guard
            case .success(.externalAccount(let executable)) = read(
                Self.file(
                    source: [
                        "executable": [
                            "command": "/bin/tok  a b", "timeout_millis": 5000, "output_file": "/run/out.json",
                        ]
                    ],
                    extra: ["service_account_impersonation": ["token_lifetime_seconds": 600]]
                ),
                environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
            ), case .executable(let settings) = executable.source
        else { throw Unexpected(#line) }
        #expect(settings.command == ["/bin/tok", "a", "b"])
        #expect(settings.timeoutMilliseconds == 5000)
        #expect(settings.outputFile == "/run/out.json")
        #expect(executable.impersonation?.lifetime == 600)
    }

    @Test func withoutImpersonationTheFederatedTokenIsTheIdentity() throws {
        var object = try JSONSerialization.jsonObject(with: Self.file(source: ["file": "/t"])) as! [String: Any]
        object["service_account_impersonation_url"] = nil
        guard case .success(.externalAccount(let account)) = read(try JSONSerialization.data(withJSONObject: object))
        else { throw Unexpected(#line) }
        #expect(
            account.summary
                == "external_account (file) via fleet-pool/fleet-provider, federated token (no impersonation)"
        )
    }

    @Test func whatIsLeftOutIsRefusedByName() {
        let cases: [(Data, [String: String], String)] = [
            (
                Self.file(source: ["file": "/t"], extra: ["universe_domain": "example.com"]), [:],
                "universe_domain \"example.com\""
            ),
            (
                Self.file(source: ["file": "/t"], extra: ["workforce_pool_user_project": "p"]), [:],
                "workforce_pool_user_project"
            ),
            (Self.file(source: ["certificate": ["use_default_certificate_config": true]]), [:], "X.509"),
            (
                Self.file(
                    source: ["executable": ["command": "/bin/tok"]],
                    type: "urn:ietf:params:oauth:token-type:id_token"
                ),
                [:], "set GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1"
            ),
            (
                Self.file(source: ["executable": ["command": "/bin/tok"]]),
                ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "true"],
                "set GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1"
            ),
            (
                Self.file(source: ["executable": ["command": "/bin/tok", "timeout_millis": 4999]]),
                ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"],
                "timeout_millis must be a whole number from 5000 to 120000"
            ),
            (
                Self.file(source: ["executable": ["command": "/bin/tok", "timeout_millis": 120_001]]),
                ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"], "timeout_millis"
            ),
            (
                Self.file(
                    source: Self.awsSource.merging(["environment_id": "aws2"]) { $1 },
                    type: "urn:ietf:params:aws:token-type:aws4_request"
                ), [:], "environment_id \"aws2\": this version of the AWS source is not supported, only aws1"
            ),
            (
                Self.file(
                    source: ["file": "/t"],
                    extra: ["service_account_impersonation": ["token_lifetime_seconds": 599]]
                ),
                [:], "token_lifetime_seconds must be a whole number from 600 to 43200"
            ),
            (
                Self.file(
                    source: ["file": "/t"],
                    extra: ["service_account_impersonation": ["token_lifetime_seconds": 43201]]
                ),
                [:], "token_lifetime_seconds"
            ),
            (Self.file(source: ["file": "/t", "url": "https://x/"]), [:], "names more than one source"),
            (Self.file(source: [:]), [:], "names no source"),
            (Self.file(source: ["file": "relative"]), [:], "file must be an absolute path"),
            (Self.file(source: ["file": "/t"], type: "urn:x"), [:], "subject_token_type \"urn:x\" is none of"),
            (
                Self.file(source: Self.awsSource), [:],
                "needs subject_token_type urn:ietf:params:aws:token-type:aws4_request"
            ),
            (
                Self.file(source: ["file": "/t", "format": ["type": "json"]]), [:],
                "type json needs subject_token_field_name"
            ),
            (Self.file(source: ["file": "/t"], extra: ["client_secret": "s"]), [:], "client_secret without client_id"),
        ]
        for (data, environment, expected) in cases {
            let reason = reason(data, environment: environment)
            #expect(reason?.contains(expected) == true, "\(expected): \(reason ?? "accepted")")
        }
    }

    @Test func urlsFollowTheirFieldsRules() {
        let cases: [(String, [String: Any], [String: Any], String?)] = [
            // token_url: https, or http to loopback only; no query, no user-info, no fragment.
            ("token_url", ["file": "/t"], ["token_url": "http://sts.example/v1/token"], "plain http"),
            ("token_url", ["file": "/t"], ["token_url": "http://127.0.0.1:8080/v1/token"], nil),
            ("token_url", ["file": "/t"], ["token_url": "https://sts.googleapis.com/v1/token?x=1"], "carries a query"),
            ("token_url", ["file": "/t"], ["token_url": "https://u:p@sts.googleapis.com/v1/token"], "user-info"),
            ("token_url", ["file": "/t"], ["token_url": "https://sts.googleapis.com/v1/token#f"], "fragment"),
            ("token_url", ["file": "/t"], ["token_url": "http://169.254.169.254/v1/token"], "plain http"),
            // A url source: a query is part of it; http to the instance-metadata addresses.
            ("url", ["url": "http://169.254.169.254/metadata/identity/oauth2/token?resource=x"], [:], nil),
            ("url", ["url": "http://[fd00:ec2::254]/latest/token"], [:], nil),
            ("url", ["url": "http://10.0.0.1/token"], [:], "plain http"),
            ("url", ["url": "https://u@idp.example/token"], [:], "user-info"),
            // The impersonation URL's path holds @ and :.
            (
                "impersonation", ["file": "/t"],
                ["service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/x"], "does not end in"
            ),
            (
                "impersonation", ["file": "/t"], ["service_account_impersonation_url": Self.impersonationURL + "?q=1"],
                "carries a query"
            ),
        ]
        for (what, source, extra, expected) in cases {
            let result = reason(Self.file(source: source, extra: extra))
            if let expected {
                #expect(result?.contains(expected) == true, "\(what) \(extra) \(source): \(result ?? "accepted")")
            } else {
                #expect(result == nil, "\(what) \(extra) \(source): \(result ?? "")")
            }
        }
        var aws = Self.awsSource
        aws["region_url"] = "http://169.254.169.254.nip.io/zone"
        #expect(
            reason(Self.file(source: aws, type: "urn:ietf:params:aws:token-type:aws4_request"))?.contains("plain http")
                == true
        )
        aws = Self.awsSource
        aws["url"] = "http://169.254.169.254/latest/meta-data/iam/security-credentials?x=1"
        #expect(
            reason(Self.file(source: aws, type: "urn:ietf:params:aws:token-type:aws4_request"))?.contains("query")
                == true
        )
        aws = Self.awsSource
        aws["regional_cred_verification_url"] = "http://sts.{region}.amazonaws.com?Action=GetCallerIdentity"
        #expect(
            reason(Self.file(source: aws, type: "urn:ietf:params:aws:token-type:aws4_request"))?.contains("plain http")
                == true
        )
    }

    @Test func theVerificationURLFillsInTheRegion() throws {
        let url = try FederationURL(
            "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15",
            field: "regional_cred_verification_url",
            file: "/f",
            rule: .verification
        )
        #expect(
            url.url(region: "eu-west-3")
                == "https://sts.eu-west-3.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"
        )
        #expect(throws: ConfigurationError.self) {
            try FederationURL("https://sts.{region}.amazonaws.com/", field: "token_url", file: "/f", rule: .endpoint)
        }
    }
}

/// AWS Signature Version 4 of the `GetCallerIdentity` request, against the published vectors
/// google-auth's own tests check its signer with (AWS's documentation example keys).
@Suite("Federation: AWS SigV4")
struct AWSRequestSignerTests {
    static let keys = AWSRequestSigner.Keys(
        accessKeyID: "AKIAIOSFODNN7EXAMPLE",
        secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        sessionToken: nil
    )
    static let sessionToken =
        "AQoEXAMPLEH4aoAH0gNCAPyJxz4BlCFFxWNE1OPTgk5TthT+FvwqnKwRcOIfrRh3c/LTo6UDdyJwOOvEVPvLXCrrrUtdnniCEXAMPLE/IvU1dYUg2RVAJBanLiHb4IgRmpRV3zrkuWJOgQs8IZZaIv2BXIa2R4OlgkBN9bkUDNCJiBeb/AXlzBBko7b15fjrBs2+cTQtpZ3CYWFXG8C5zqx37wnOE49mRl/+OtkIKGO7fAE"
    /// 2020-08-11T06:55:22Z.
    static let date: Int64 = 1_597_128_922

    static func url() throws -> FederationURL {
        try FederationURL(
            "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15",
            field: "regional_cred_verification_url",
            file: "/f",
            rule: .verification
        )
    }

    @Test func temporaryKeysSignAsThePublishedVector() throws {
        var keys = Self.keys
        keys.sessionToken = Self.sessionToken
        let signed = AWSRequestSigner.sign(
            url: try Self.url(),
            region: "us-east-2",
            keys: keys,
            date: Self.date,
            unsignedHeaders: []
        )
        let headers = Dictionary(uniqueKeysWithValues: signed.headers.map { ($0.key, $0.value) })
        #expect(
            headers["Authorization"]
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20200811/us-east-2/sts/aws4_request, "
                + "SignedHeaders=host;x-amz-date;x-amz-security-token, "
                + "Signature=596aa990b792d763465d73703e684ca273c45536c6d322c31be01a41d02e5b60"
        )
        #expect(headers["host"] == "sts.us-east-2.amazonaws.com")
        #expect(headers["x-amz-date"] == "20200811T065522Z")
        #expect(headers["x-amz-security-token"] == Self.sessionToken)
        #expect(signed.url == "https://sts.us-east-2.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15")
    }

    @Test func longTermKeysSignAsThePublishedVector() throws {
        let signed = AWSRequestSigner.sign(
            url: try Self.url(),
            region: "us-east-2",
            keys: Self.keys,
            date: Self.date,
            unsignedHeaders: []
        )
        #expect(
            signed.headers.first?.value
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20200811/us-east-2/sts/aws4_request, "
                + "SignedHeaders=host;x-amz-date, Signature=9e722e5b7bfa163447e2a14df118b45ebd283c5aea72019bdf921d6e7dc01a9a"
        )
    }

    @Test func theSubjectTokenIsThePercentEncodedSortedRequest() throws {
        let signed = AWSRequestSigner.sign(
            url: try Self.url(),
            region: "us-east-2",
            keys: Self.keys,
            date: Self.date,
            unsignedHeaders: [("x-goog-cloud-target-resource", FederationFileTests.audience)]
        )
        #expect(signed.headers.map(\.key) == ["Authorization", "host", "x-amz-date", "x-goog-cloud-target-resource"])
        // As google-auth: the header Google reads is added after signing.
        #expect(signed.headers[0].value.contains("SignedHeaders=host;x-amz-date,"))
        let decoded = try #require(signed.subjectToken.removingPercentEncoding)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(decoded.utf8)) as? [String: Any])
        #expect(object["method"] as? String == "POST")
        #expect(object["url"] as? String == signed.url)
        let headers = try #require(object["headers"] as? [[String: String]])
        #expect(headers.map { $0["key"]! } == signed.headers.map(\.key))
        #expect(decoded.hasPrefix("{\"headers\":[{\"key\":\"Authorization\",\"value\":\"AWS4-HMAC-SHA256 "))
        #expect(!signed.subjectToken.contains(" ") && !signed.subjectToken.contains("\""))
    }

    @Test func datesAcrossYearsAndLeapDaysAreAWSs() {
        #expect(AWSRequestSigner.timestamps(0) == ("19700101T000000Z", "19700101"))
        #expect(AWSRequestSigner.timestamps(951_782_400) == ("20000229T000000Z", "20000229"))
        #expect(AWSRequestSigner.timestamps(1_597_128_922) == ("20200811T065522Z", "20200811"))
        #expect(AWSRequestSigner.timestamps(4_102_444_799) == ("20991231T235959Z", "20991231"))
    }
}

/// A test's case that read as something else than it should.
struct Unexpected: Error, CustomStringConvertible {
    var line: Int
    init(_ line: Int) { self.line = line }
    var description: String { "unexpected result at line \(line)" }
}
