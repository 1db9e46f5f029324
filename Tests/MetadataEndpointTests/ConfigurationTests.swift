import MetadataEndpoint
import Testing

/// `metadata_server`'s settings.
@Suite struct ConfigurationTests {
    @Test(arguments: [
        ("127.0.0.1:8989", "127.0.0.1:8989"), ("127.1.2.3:80", "127.1.2.3:80"), ("[::1]:8989", "[::1]:8989"),
        ("[0:0::1]:1", "[0:0::1]:1"), ("127.0.0.1:65535", "127.0.0.1:65535"),
    ])
    func loopbackLiteralsAreAccepted(text: String, shown: String) throws {
        #expect(try MetadataListenAddress(parsing: text).description == shown)
    }

    @Test(arguments: [
        "localhost:8989", "0.0.0.0:8989", "10.0.0.1:8989", "[::]:8989", "::1:8989", "[::1]", "127.0.0.1",
        "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:+80", "[fe80::1]:8989", "[::ffff:127.0.0.1]:8989",
        "metadata.google.internal:80", "127.0.0.1:", "127.0.0.1:0", "[::1]:0",
    ])
    func everythingElseIsRefused(text: String) {
        #expect(throws: MetadataConfigurationError.self) { try MetadataListenAddress(parsing: text) }
    }

    /// The message says the rule: 0 is refused as 65536 is (a test's port 0 is
    /// `init(host:port:)`'s).
    @Test(arguments: ["127.0.0.1:65536", "127.0.0.1:0", "[::1]:0", "127.0.0.1:x"])
    func thePortMessageNamesTheRange(text: String) {
        #expect(throws: MetadataConfigurationError(key: "listen", "the port must be a number from 1 to 65535")) {
            try MetadataListenAddress(parsing: text)
        }
    }

    @Test func theDefaultMustBeAnEntry() throws {
        let configuration = MetadataServerConfiguration(listen: Fixture.listen, defaultEntry: "fleet-admin")
        try configuration.validate(entryNames: ["fleet-admin"])
        #expect(throws: MetadataConfigurationError(key: "default", "fleet-admin is not an entry of access_tokens")) {
            try configuration.validate(entryNames: ["reader"])
        }
        var withProject = configuration
        withProject.projectID = "Not A Project"
        #expect(throws: MetadataConfigurationError.self) { try withProject.validate(entryNames: ["fleet-admin"]) }
        withProject.projectID = "example.com:fleet-prod"
        try withProject.validate(entryNames: ["fleet-admin"])
    }
}
