import MetadataEndpoint
import Testing

/// The checks every request passes before its path is looked at.
@Suite struct RefusalTests {
    let router = Fixture.router()

    @Test func aRequestWithoutMetadataFlavorIsRefused() async {
        for headers: [(String, String?)] in [
            [("Metadata-Flavor", nil)], [("Metadata-Flavor", "google")], [("Metadata-Flavor", "")],
            [("Metadata-Flavor", "Google, Google")],
        ] {
            let response = await ask(router, "/computeMetadata/v1/project/project-id", headers: headers)
            #expect(response.status == 403)
            #expect(response.text.contains("Metadata-Flavor"))
            #expect(response.value(of: "Content-Type") == "text/plain; charset=utf-8")
        }
    }

    @Test func aRepeatedMetadataFlavorIsRefused() async {
        let response = await Fixture.router().respond(
            to: MetadataRequest(
                method: "GET",
                target: "/",
                headers: [("Host", "localhost"), ("Metadata-Flavor", "Google"), ("Metadata-Flavor", "Google")]
            ),
            from: Fixture.admin
        )
        #expect(response.status == 403)
    }

    @Test func theHeaderNameIsMatchedInAnyCase() async {
        let response = await ask(router, "/", headers: [("Metadata-Flavor", nil), ("metadata-flavor", "Google")])
        #expect(response.status == 200)
    }

    @Test(arguments: [("X-Forwarded-For", "127.0.0.1"), ("Forwarded", "for=127.0.0.1"), ("x-forwarded-for", "")])
    func aRequestThroughAProxyIsRefused(name: String, value: String) async {
        let response = await ask(router, "/", headers: [(name, value)])
        #expect(response.status == 403)
        #expect(response.text.contains("proxy"))
    }

    @Test(arguments: [
        "127.0.0.1:8989", "127.0.0.1", "localhost", "localhost:8989", "LocalHost:8989", "metadata.google.internal",
        "metadata.google.internal:8989", "Metadata.Google.Internal.", "metadata.google.internal.:8989",
    ])
    func theseHostsNameTheEndpoint(host: String) async {
        let response = await ask(router, "/", headers: [("Host", host)])
        #expect(response.status == 200)
    }

    @Test(arguments: [
        "evil.example", "evil.example:8989", "127.0.0.2:8989", "127.0.0.1:8990", "localhost:80", "localhost:",
        "[::1]:8989", "[127.0.0.1]:8989", "127.0.0.1:8989:1", "", "metadata.google.internal.evil.example",
        "localhost:+8989", "0x7f.1:8989", "2130706433:8989",
    ])
    func otherHostsAreRefused(host: String) async {
        let response = await ask(router, "/", headers: [("Host", host)])
        #expect(response.status == 403)
        #expect(response.text.contains("is not this endpoint"))
    }

    @Test func aMissingOrRepeatedHostIsRefused() async {
        #expect(await ask(router, "/", headers: [("Host", nil)]).status == 403)
        let twice = await router.respond(
            to: MetadataRequest(
                method: "GET",
                target: "/",
                headers: [("Host", "localhost"), ("Host", "evil.example"), ("Metadata-Flavor", "Google")]
            ),
            from: Fixture.admin
        )
        #expect(twice.status == 403)
        #expect(twice.text.contains("several Host fields"))
    }

    @Test func anIPv6EndpointTakesItsBracketedAddress() async throws {
        let router = Fixture.router(listen: try MetadataListenAddress(parsing: "[::1]:8989"))
        #expect(await ask(router, "/", headers: [("Host", "[::1]:8989")]).status == 200)
        #expect(await ask(router, "/", headers: [("Host", "[0:0::1]:8989")]).status == 200)
        #expect(await ask(router, "/", headers: [("Host", "localhost:8989")]).status == 200)
        #expect(await ask(router, "/", headers: [("Host", "::1")]).status == 403)
        #expect(await ask(router, "/", headers: [("Host", "127.0.0.1:8989")]).status == 403)
    }

    @Test(arguments: ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "get"])
    func methodsOtherThanGETAndHEADAre405(method: String) async {
        let response = await ask(router, "/computeMetadata/v1/project/project-id", method: method)
        #expect(response.status == 405)
        #expect(response.value(of: "Allow") == "GET, HEAD")
    }

    @Test func headIsAnsweredAsGET() async {
        let head = await ask(router, "/computeMetadata/v1/project/project-id", method: "HEAD")
        let get = await ask(router, "/computeMetadata/v1/project/project-id")
        #expect(head.status == 200)
        #expect(head.body == get.body)
    }

    @Test func theHostIsCheckedBeforeTheFlavorAndTheMethod() async {
        let response = await ask(
            router,
            "/",
            method: "POST",
            headers: [("Host", "evil.example"), ("Metadata-Flavor", nil)]
        )
        #expect(response.status == 403)
        #expect(response.text.contains("evil.example"))
    }

    @Test func waitForChangeIsRefused() async {
        let response = await ask(router, "/computeMetadata/v1/project/project-id?wait_for_change=true")
        #expect(response.status == 400)
    }

    @Test func anAbsoluteFormTargetMustNameTheEndpointToo() async {
        let good = await ask(router, "http://127.0.0.1:8989/computeMetadata/v1/universe/universe-domain")
        #expect(good.status == 200)
        #expect(good.text == "googleapis.com")
        let bad = await ask(router, "http://evil.example:8989/computeMetadata/v1/universe/universe-domain")
        #expect(bad.status == 403)
        #expect(await ask(router, "ftp://localhost/").status == 400)
        #expect(await ask(router, "*").status == 400)
    }

    @Test func aMalformedEscapeIsABadRequest() async {
        #expect(await ask(router, "/computeMetadata/v1/%zz").status == 400)
        #expect(await ask(router, "/computeMetadata/v1/%c3%28").status == 400)
    }
}
