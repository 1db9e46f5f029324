import MetadataEndpoint
import Testing

/// The paths served to anyone: the ping, the directories, the project and the universe.
@Suite struct PathTests {
    let router = Fixture.router()

    @Test func thePingAnswersWithTheFlavor() async {
        let response = await ask(router, "/", from: .unidentified(reason: "test"))
        #expect(response.status == 200)
        #expect(response.value(of: "Metadata-Flavor") == "Google")
        #expect(response.value(of: "Content-Type") == "application/text")
        #expect(response.text == "computeMetadata/\n")
    }

    @Test(arguments: [
        ("/computeMetadata", "v1/\n"), ("/computeMetadata/", "v1/\n"),
        ("/computeMetadata/v1", "instance/\nproject/\nuniverse/\n"),
        ("/computeMetadata/v1/", "instance/\nproject/\nuniverse/\n"),
        // gcp-metadata's (Node) detection ping.
        ("/computeMetadata/v1/instance", "service-accounts/\n"),
        ("/computeMetadata/v1/instance/", "service-accounts/\n"),
        ("/computeMetadata/v1/project/", "project-id\n"), ("/computeMetadata/v1/universe/", "universe-domain\n"),
    ])
    func directoriesListWhatIsServed(path: String, listing: String) async {
        let response = await ask(router, path, from: .unidentified(reason: "test"))
        #expect(response.status == 200)
        #expect(response.text == listing)
        #expect(response.value(of: "Content-Type") == "application/text")
    }

    @Test func theUniverseIsGooglesPublicCloud() async {
        let response = await ask(
            router,
            "/computeMetadata/v1/universe/universe-domain",
            from: .unidentified(reason: "x")
        )
        #expect(response.status == 200)
        #expect(response.text == "googleapis.com")
        #expect(response.value(of: "Content-Type") == "application/text")
    }

    @Test func theConfiguredProjectIDComesFirst() async {
        let router = Fixture.router(projectID: "configured-project")
        let response = await ask(router, "/computeMetadata/v1/project/project-id", from: .unidentified(reason: "x"))
        #expect(response.status == 200)
        #expect(response.text == "configured-project")
    }

    @Test func withoutOneTheProjectIsTheDefaultAccounts() async {
        let response = await ask(router, "/computeMetadata/v1/project/project-id")
        #expect(response.status == 200)
        #expect(response.text == "fleet-prod")
        #expect(response.value(of: "Content-Type") == "application/text")
    }

    @Test func anAccountOutsideIAMNamesNoProject() async {
        let router = Fixture.router(defaultEntry: "elsewhere")
        let response = await ask(router, "/computeMetadata/v1/project/project-id")
        #expect(response.status == 404)
        #expect(response.text.contains("no project id"))
        // Nor does a default entry that is gone.
        #expect(await ask(Fixture.router(defaultEntry: "gone"), "/computeMetadata/v1/project/project-id").status == 404)
    }

    @Test func aLeafWithATrailingSlashIsNotFound() async {
        #expect(await ask(router, "/computeMetadata/v1/project/project-id/").status == 404)
        #expect(await ask(router, "/computeMetadata/v1/instance/service-accounts/default/email/").status == 404)
    }

    @Test func anUnservedPathIsNotFoundByName() async {
        let response = await ask(router, "/computeMetadata/v1/instance/hostname?alt=text")
        #expect(response.status == 404)
        #expect(response.text == "404 Not Found: /computeMetadata/v1/instance/hostname\n")
        #expect(response.value(of: "Content-Type") == "text/plain; charset=utf-8")
        #expect(await ask(router, "/computeMetadata/v2/").status == 404)
        #expect(await ask(router, "/computeMetadata//v1").status == 404)
        #expect(await ask(router, "/computeMetadata/v1/instance/service-accounts/default/token/x").status == 404)
    }

    @Test func theEchoedPathIsEscapedAndCut() async {
        let hostile = await ask(router, "/<script>alert('x')</script>%0d%0aSet-Cookie:%20a=b/\u{e9}")
        #expect(hostile.status == 404)
        #expect(
            hostile.text == "404 Not Found: /%3Cscript%3Ealert(%27x%27)%3C/script%3E%0D%0ASet-Cookie:%20a=b/%C3%A9\n"
        )
        let long = await ask(router, "/" + String(repeating: "a", count: 500))
        #expect(long.status == 404)
        #expect(long.text == "404 Not Found: /" + String(repeating: "a", count: 199) + "...\n")
    }

    @Test func identityTokensAreNotServed() async {
        let response = await ask(router, "/computeMetadata/v1/instance/service-accounts/default/identity?audience=x")
        #expect(response.status == 404)
        #expect(response.text.contains("identity tokens are not served"))
    }
}
