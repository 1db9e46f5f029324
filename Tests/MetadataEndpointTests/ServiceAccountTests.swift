import MetadataEndpoint
import Testing

/// `instance/service-accounts/`: who gets which entry's account, scopes and token.
@Suite struct ServiceAccountTests {
    let tokens = FakeTokenSource(entries: Fixture.entries)
    var router: MetadataRouter { Fixture.router(tokens: tokens) }
    let base = "/computeMetadata/v1/instance/service-accounts/"

    @Test func theDefaultAccountRecursiveIsWhatGoogleAuthReads() async {
        let response = await ask(router, base + "default/?recursive=true")
        #expect(response.status == 200)
        #expect(response.value(of: "Content-Type") == "application/json")
        #expect(
            response.text
                == #"{"aliases":["default"],"email":"fleet-admin@fleet-prod.iam.gserviceaccount.com","#
                + #""scopes":["https://www.googleapis.com/auth/cloud-platform","https://www.googleapis.com/auth/userinfo.email"]}"#
        )
        #expect(tokens.calls.isEmpty)
    }

    @Test func anotherEntrysAccountHasNoAliases() async {
        let response = await ask(router, base + Fixture.readerAccount + "/?recursive=true", from: Fixture.reader)
        #expect(response.status == 200)
        #expect(
            response.text
                == #"{"aliases":[],"email":"reader@fleet-prod.iam.gserviceaccount.com","#
                + #""scopes":["https://www.googleapis.com/auth/cloud-platform"]}"#
        )
    }

    @Test func theAccountDirectoryListsLikeTheRealServer() async {
        for path in ["default/", "default", Fixture.adminAccount + "/"] {
            let response = await ask(router, base + path)
            #expect(response.status == 200)
            #expect(response.text == "aliases\nemail\nidentity\nscopes\ntoken\n")
            #expect(response.value(of: "Content-Type") == "application/text")
        }
    }

    @Test func emailScopesAndAliasesAreText() async {
        #expect(await ask(router, base + "default/email").text == Fixture.adminAccount)
        #expect(await ask(router, base + "default/scopes").text == Fixture.cloudPlatform + "\n" + Fixture.email + "\n")
        #expect(await ask(router, base + "default/aliases").text == "default\n")
        #expect(await ask(router, base + Fixture.readerAccount + "/aliases", from: Fixture.reader).text == "")
        let email = await ask(router, base + Fixture.adminAccount + "/email")
        #expect(email.text == Fixture.adminAccount)
        #expect(email.value(of: "Content-Type") == "application/text")
    }

    @Test func anEmailIsMatchedInAnyCaseAndEscaped() async {
        let response = await ask(router, base + "Fleet-Admin%40FLEET-PROD.iam.gserviceaccount.com/email")
        #expect(response.status == 200)
        #expect(response.text == Fixture.adminAccount)
    }

    @Test func theTokenIsTheEntrysWithWholeSecondsLeft() async {
        let response = await ask(router, base + "default/token")
        #expect(response.status == 200)
        #expect(response.value(of: "Content-Type") == "application/json")
        #expect(response.value(of: "Cache-Control") == "no-store")
        #expect(
            response.text == #"{"access_token":"ya29.token-of-fleet-admin","expires_in":3599,"token_type":"Bearer"}"#
        )
        #expect(tokens.calls == ["fleet-admin"])
        let byEmail = await ask(router, base + Fixture.adminAccount + "/token")
        #expect(byEmail.text.contains("ya29.token-of-fleet-admin"))
        #expect(tokens.calls == ["fleet-admin", "fleet-admin"])
    }

    @Test func anExpiredTokenHasNoSecondsLeft() async {
        let tokens = FakeTokenSource(entries: Fixture.entries, expiresAt: Fixture.now - 10)
        let response = await ask(Fixture.router(tokens: tokens), base + "default/token")
        #expect(response.text.contains(#""expires_in":0,"#))
    }

    @Test(arguments: [
        "scopes=https://www.googleapis.com/auth/cloud-platform",
        "scopes=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fcloud-platform%2Chttps%3A%2F%2Fwww.googleapis.com%2Fauth%2Fuserinfo.email",
        "scopes=https://www.googleapis.com/auth/userinfo.email,https://www.googleapis.com/auth/cloud-platform",
        "scopes=",
        "scopes=https://www.googleapis.com/auth/cloud-platform&scopes=https://www.googleapis.com/auth/userinfo.email",
        "alt=json&scopes=https://www.googleapis.com/auth/cloud-platform+https://www.googleapis.com/auth/userinfo.email",
    ])
    func scopesWithinTheEntrysAreServed(query: String) async {
        let response = await ask(router, base + "default/token?" + query)
        #expect(response.status == 200)
        #expect(tokens.calls == ["fleet-admin"])
    }

    @Test func scopesOutsideTheEntrysAreRefusedByNameWithoutAFetch() async {
        let response = await ask(
            router,
            base
                + "default/token?scopes=https://www.googleapis.com/auth/cloud-platform,https://www.googleapis.com/auth/devstorage.full_control,<x>"
        )
        #expect(response.status == 403)
        #expect(
            response.text
                == "403 Forbidden: entry fleet-admin does not have the scopes "
                + "https://www.googleapis.com/auth/devstorage.full_control, %3Cx%3E\n"
        )
        #expect(tokens.calls.isEmpty)
    }

    @Test func aFailingTokenSourceIs503WithoutItsDetails() async {
        tokens.setFailing(true)
        let response = await ask(router, base + "default/token")
        #expect(response.status == 503)
        #expect(!response.text.contains("secret detail"))
        #expect(response.failure == "IAM said no (secret detail)")
    }

    @Test func aUserTheRulesDoNotNameIsRefusedWithoutAFetch() async {
        for path in ["default/token", "default/email", "default/?recursive=true", "default/", "default/scopes"] {
            let response = await ask(router, base + path, from: Fixture.stranger)
            #expect(response.status == 403)
            #expect(response.text.contains("uid 4242 is not allowed"))
        }
        #expect(tokens.calls.isEmpty)
    }

    @Test func rootAndTheAgentsUIDGetNoExemption() async {
        let response = await ask(router, base + "default/token", from: Fixture.root)
        #expect(response.status == 403)
        #expect(tokens.calls.isEmpty)
    }

    @Test func aPrimaryOrSupplementaryGroupAllows() async {
        let primary = MetadataPeer.user(.init(uid: 5000, gid: 2000, groups: [2000]))
        let supplementary = MetadataPeer.user(.init(uid: 5001, gid: 5001, groups: [5001, 2000]))
        #expect(await ask(router, base + "default/token", from: primary).status == 200)
        #expect(await ask(router, base + "default/token", from: supplementary).status == 200)
    }

    @Test func anUnidentifiedPeerGetsNoAccount() async {
        let peer = MetadataPeer.unidentified(reason: "no TCP socket from 127.0.0.1:1 to 127.0.0.1:8989")
        for path in ["default/token", "default/email", "default/?recursive=true", "", "?recursive=true"] {
            let response = await ask(router, base + path, from: peer)
            #expect(response.status == 403)
            #expect(response.text.contains("could not be identified: no TCP socket"))
        }
        #expect(tokens.calls.isEmpty)
    }

    @Test func anUnknownAccountIsNotFound() async {
        let response = await ask(router, base + "nobody@fleet-prod.iam.gserviceaccount.com/token")
        #expect(response.status == 404)
        #expect(response.text.contains("no such service account"))
        let noDefault = await ask(Fixture.router(tokens: tokens, defaultEntry: "gone"), base + "default/token")
        #expect(noDefault.status == 404)
        #expect(tokens.calls.isEmpty)
    }

    @Test func entriesSharingAnAccountServeTheDefaultFirstThenWhomTheRulesAllow() async {
        // fleet-admin (the default) and admin-narrow share an account.
        let asAdmin = await ask(router, base + Fixture.adminAccount + "/?recursive=true")
        #expect(asAdmin.text.contains(#""aliases":["default"]"#))
        let asNarrow = await ask(router, base + Fixture.adminAccount + "/?recursive=true", from: Fixture.narrow)
        #expect(asNarrow.text == #"{"aliases":[],"email":"\#(Fixture.adminAccount)","scopes":["\#(Fixture.email)"]}"#)
        let token = await ask(router, base + Fixture.adminAccount + "/token", from: Fixture.narrow)
        #expect(token.text.contains("ya29.token-of-admin-narrow"))
        // admin-narrow's scopes are its own.
        let wider = await ask(
            router,
            base + Fixture.adminAccount + "/token?scopes=" + Fixture.cloudPlatform,
            from: Fixture.narrow
        )
        #expect(wider.status == 403)
        // Neither allows the stranger.
        let refused = await ask(router, base + Fixture.adminAccount + "/token", from: Fixture.stranger)
        #expect(refused.status == 403)
        #expect(refused.text.contains("fleet-admin, admin-narrow"))
        #expect(tokens.calls == ["admin-narrow"])
    }

    @Test func theAccountsDirectoryListsOnlyWhatThePeerMayHave() async {
        let admin = await ask(router, base)
        #expect(admin.text == "default/\n\(Fixture.adminAccount)/\n123-compute@developer.gserviceaccount.com/\n")
        let reader = await ask(router, base, from: Fixture.reader)
        #expect(reader.text == "\(Fixture.readerAccount)/\n")
        let stranger = await ask(router, base, from: Fixture.stranger)
        #expect(stranger.status == 200)
        #expect(stranger.text == "")
        let recursive = await ask(router, base + "?recursive=true", from: Fixture.reader)
        #expect(recursive.value(of: "Content-Type") == "application/json")
        #expect(
            recursive.text
                == #"{"\#(Fixture.readerAccount)":{"aliases":[],"email":"\#(Fixture.readerAccount)","scopes":["\#(Fixture.cloudPlatform)"]}}"#
        )
    }
}
