#!/usr/bin/env python3
"""Google's own google-auth reads fake-google's external_account files against the fake.

Run by scripts/check-google-auth-federation, which starts fake-google with
`--write-external-account DIR --log-calls yes` and its standard output going to a file; this reads
that file (the `name value` lines up to `listening`, then one line per call) and, for each source,
loads the file with `google.auth.load_credentials_from_file(path, scopes=[cloud-platform])`, then
`creds.refresh(Request())`, and checks that a token came back and that the fake saw what Google
would: the STS token exchange (for AWS: a SigV4 signature its verifier accepted) and the
generateAccessToken impersonation. Two refusals are checked too: an AWS configuration without
IMDSv2 (the fake requires it) and a signature made with a wrong secret.

Nothing leaves the machine: the requests session google-auth is given refuses every URL but the
fake's, and sends the one Google URL google-auth calls on its own (Cloud Resource Manager, for the
project id of a workload identity pool: `load_credentials_from_file` calls it when scopes are
given) to the fake's copy of it, through a requests transport adapter.

Prints one line per check (`ok <name>: ...` or `FAIL <name>: ...`); exits 1 when one failed.
Tokens are never printed.
"""

import argparse
import contextlib
import json
import os
import sys
import time
import warnings

import google.auth
import google.auth.aws
import google.auth.exceptions
import google.auth.transport.requests
import requests
import requests.adapters

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
CLOUD_RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com/"
AWS_TOKEN_TYPE = "urn:ietf:params:aws:token-type:aws4_request"
AWS_ENVIRONMENT = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                   "AWS_DEFAULT_REGION")
# How long the fake may take to log a call (it writes its lines every 100 ms).
LOG_WAIT_SECONDS = 5.0


class FakeLog:
    """fake-google's standard output: its `name value` lines, then one line per call."""

    def __init__(self, path):
        self._file = open(path, encoding="utf-8")
        self._pending = ""
        self.settings = {}
        self.external_accounts = {}
        self.accounts = []
        self.calls = []
        deadline = time.monotonic() + 300
        while "listening" not in self.settings:
            for line in self._read():
                name, _, value = line.partition(" ")
                if name == "external-account":
                    source, _, path = value.partition(" ")
                    self.external_accounts[source] = path
                elif name == "account":
                    self.accounts.append(value.split(" ")[0])
                else:
                    self.settings[name] = value
                if name == "listening":
                    break
            else:
                if time.monotonic() > deadline:
                    raise SystemExit("check-google-auth-federation: fake-google never said `listening`")
                time.sleep(0.05)

    def _read(self):
        self._pending += self._file.read()
        *lines, self._pending = self._pending.split("\n")
        return lines

    def poll(self):
        for line in self._read():
            fields = line.split(" ")
            if len(fields) >= 3 and fields[1].isdigit():
                self.calls.append(fields)

    def since(self, start_ms, kind):
        """The calls of `kind` received at or after `start_ms`."""
        self.poll()
        return [call for call in self.calls if call[0] == kind and int(call[1]) >= start_ms]

    def wait_for(self, start_ms, kind, matches):
        """The first call of `kind` since `start_ms` that `matches`, waiting for the fake to log it."""
        deadline = time.monotonic() + LOG_WAIT_SECONDS
        while True:
            found = [call for call in self.since(start_ms, kind) if matches(call)]
            if found or time.monotonic() > deadline:
                return found[0] if found else None
            time.sleep(0.05)


class RefuseAdapter(requests.adapters.BaseAdapter):
    """A transport that sends nothing: every URL but the fake's ends here."""

    def send(self, request, **kwargs):
        raise requests.exceptions.ConnectionError(f"refused by the check (not the fake): {request.url}")

    def close(self):
        pass


class ToFakeAdapter(requests.adapters.HTTPAdapter):
    """Sends a request for `prefix` to the same path under `root` (the fake)."""

    def __init__(self, prefix, root):
        super().__init__()
        self._prefix = prefix
        self._root = root

    def send(self, request, **kwargs):
        request.url = self._root + request.url[len(self._prefix):]
        return super().send(request, **kwargs)


def offline_request(fake_root):
    """google-auth's requests transport, on a session that reaches the fake only."""
    session = requests.Session()
    session.mount("http://", RefuseAdapter())
    session.mount("https://", RefuseAdapter())
    session.mount(fake_root + "/", requests.adapters.HTTPAdapter())
    session.mount(CLOUD_RESOURCE_MANAGER, ToFakeAdapter(CLOUD_RESOURCE_MANAGER, fake_root + "/"))
    return google.auth.transport.requests.Request(session=session)


@contextlib.contextmanager
def environment(**values):
    """The AWS variables and GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES unset, then `values` set."""
    names = set(AWS_ENVIRONMENT) | {"GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES"} | set(values)
    saved = {name: os.environ.get(name) for name in names}
    try:
        for name in names:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def now_ms():
    return int(time.time() * 1000)


class Check:
    def __init__(self, log, account):
        self.log = log
        self.account = account
        self.root = log.settings["iam-endpoint"]
        self.audience = log.settings["audience"]
        self.failures = 0

    def report(self, name, problems, detail):
        if problems:
            self.failures += 1
            print(f"FAIL {name}: " + "; ".join(problems), flush=True)
        else:
            print(f"ok   {name}: {detail}", flush=True)

    def source(self, name, path, expect_aws=None, **env):
        """Loads `path`, refreshes, and checks the fake saw the exchange and the impersonation.
        `expect_aws`: None (not AWS), "imds" (credentials from the metadata, IMDSv2), "imdsv1"
        (from the metadata without session tokens) or "env"."""
        problems = []
        with open(path, encoding="utf-8") as file:
            token_type = json.load(file)["subject_token_type"]
        start = now_ms()
        request = offline_request(self.root)
        try:
            with environment(**env), warnings.catch_warnings():
                # load_credentials_from_file warns (DeprecationWarning) that it does not validate
                # the configuration it loads: these are the fake's own files.
                warnings.simplefilter("ignore", DeprecationWarning)
                credentials, project = google.auth.load_credentials_from_file(
                    path, scopes=[CLOUD_PLATFORM], request=request)
                refreshed = now_ms()
                credentials.refresh(request)
        except Exception as error:  # noqa: BLE001 - any failure of google-auth is the finding
            self.report(name, [f"google-auth failed: {type(error).__name__}: {error}"], "")
            return
        token = credentials.token or ""
        if not token.startswith("ya29.fake-"):
            problems.append("no access token of the fake came back")
        if credentials.expiry is None:
            problems.append("no expiry")
        if project != "fake-project":
            problems.append(f"project id {project!r}, not the fake Cloud Resource Manager's fake-project")

        def exchanged(call):
            return call[2] == "200" and call[3] == self.audience and call[4] == token_type

        # google-auth exchanges once: load_credentials_from_file's project id lookup refreshes,
        # and the impersonated refresh after it reuses the federated token while it is valid.
        exchange = self.log.wait_for(start, "sts", exchanged)
        if exchange is None:
            seen = [" ".join(call[2:]) for call in self.log.since(start, "sts")]
            problems.append(f"STS logged no 200 exchange of a {token_type} for the audience (saw {seen})")
        impersonation = self.log.wait_for(
            refreshed, "generateAccessToken", lambda call: call[2] == "200" and call[3] == self.account)
        if impersonation is None:
            problems.append(f"generateAccessToken logged no 200 for {self.account}")
        exchanges = len([call for call in self.log.since(start, "sts") if exchanged(call)])
        impersonations = len(self.log.since(start, "generateAccessToken"))
        detail = f"sts 200 x{exchanges} ({token_type.rsplit(':', 1)[-1]})"
        if expect_aws is not None:
            if exchange is not None and not exchange[5].startswith("verified:"):
                problems.append(f"the fake's SigV4 verifier did not accept google-auth's signature ({exchange[5]})")
            elif exchange is not None:
                detail += f" SigV4 {exchange[5]}"
            metadata = self.log.since(start, "aws")
            if expect_aws in ("imds", "imdsv1"):
                wanted = [("PUT", "/latest/api/token")] if expect_aws == "imds" else []
                wanted += [("GET", "/latest/meta-data/placement/availability-zone"),
                          ("GET", "/latest/meta-data/iam/security-credentials"),
                          ("GET", "/latest/meta-data/iam/security-credentials/" + self.log.settings["aws-role"])]
                for method, path in wanted:
                    if not any(call[3] == method and call[4] == path and call[2] == "200" for call in metadata):
                        problems.append(f"the AWS metadata saw no 200 {method} {path}")
                unsessioned = [call for call in metadata if call[3] == "GET" and call[5] != "token"]
                if expect_aws == "imds" and unsessioned:
                    problems.append(f"metadata GETs without an IMDSv2 session token: {unsessioned}")
                if expect_aws == "imdsv1" and len(unsessioned) != len(metadata):
                    problems.append(f"metadata calls with a session token: {metadata}")
                detail += f", AWS metadata {len(metadata)} calls ({'IMDSv2' if expect_aws == 'imds' else 'IMDSv1'})"
            elif metadata:
                problems.append(f"the AWS metadata was called though the keys were in the environment: {metadata}")
            else:
                detail += ", keys from the environment (no metadata calls)"
        if name == "url":
            if not any(call[2] == "200" for call in self.log.since(start, "azure")):
                problems.append("the Azure token URL logged no 200")
            else:
                detail += ", Azure token URL 200"
        detail += f", generateAccessToken 200 x{impersonations} {self.account}, project {project}"
        self.report(name, problems, detail)

    def refused(self, name, make, expected):
        """`make()` gives credentials whose refresh must fail with a message containing `expected`."""
        start = now_ms()
        request = offline_request(self.root)
        try:
            with environment(), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                make(request).refresh(request)
        except google.auth.exceptions.GoogleAuthError as error:
            if expected in str(error):
                self.report(name, [], f"refused as expected ({expected})")
            else:
                self.report(name, [f"refused, but not with {expected!r}: {error}"], "")
            return
        self.report(name, [f"google-auth got a token (fake calls: {self.log.since(start, 'sts')})"], "")


class WrongSecretSupplier(google.auth.aws.AwsSecurityCredentialsSupplier):
    """The fake's AWS keys with a secret that is not theirs."""

    def __init__(self, settings):
        self._settings = settings

    def get_aws_security_credentials(self, context, request):
        secret = self._settings["aws-secret-access-key"]
        return google.auth.aws.AwsSecurityCredentials(
            self._settings["aws-access-key-id"], secret[::-1], self._settings["aws-session-token"])

    def get_aws_region(self, context, request):
        return self._settings["aws-region"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="fake-google's standard output (a file)")
    parser.add_argument("--dir", required=True, help="the --write-external-account directory")
    arguments = parser.parse_args()
    log = FakeLog(arguments.log)
    if not log.accounts or len(log.external_accounts) < 5:
        raise SystemExit(f"check-google-auth-federation: fake-google printed {log.settings} "
                         f"and {log.external_accounts}")
    # The files impersonate the first account.
    check = Check(log, log.accounts[0])
    print(f"google-auth {google.auth.__version__}, fake-google on {check.root}", flush=True)
    files = log.external_accounts
    check.source("file-text", files["file-text"])
    check.source("file-json", files["file-json"])
    check.source("url", files["url"])
    check.source("aws", files["aws"], expect_aws="imds")
    settings = log.settings
    check.source("aws-env", files["aws"], expect_aws="env",
                 AWS_ACCESS_KEY_ID=settings["aws-access-key-id"],
                 AWS_SECRET_ACCESS_KEY=settings["aws-secret-access-key"],
                 AWS_SESSION_TOKEN=settings["aws-session-token"], AWS_REGION=settings["aws-region"])
    check.source("executable", files["executable"], GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES="1")

    with open(files["aws"], encoding="utf-8") as file:
        info = json.load(file)
    imdsv1 = json.loads(json.dumps(info))
    del imdsv1["credential_source"]["imdsv2_session_token_url"]
    if settings["aws-require-imdsv2"] == "no":
        path = os.path.join(arguments.dir, "aws-imdsv1.json")
        with open(path, "w", encoding="utf-8") as file:
            json.dump(imdsv1, file)
        check.source("aws-imdsv1", path, expect_aws="imdsv1")
    else:
        check.refused("aws-imdsv1", lambda request: google.auth.aws.Credentials.from_info(
            imdsv1, scopes=[CLOUD_PLATFORM]), "Unable to retrieve AWS region")
    wrong = dict(info)
    del wrong["credential_source"]
    check.refused("aws-wrong-secret", lambda request: google.auth.aws.Credentials(
        audience=wrong["audience"], subject_token_type=AWS_TOKEN_TYPE, token_url=wrong["token_url"],
        aws_security_credentials_supplier=WrongSecretSupplier(settings), scopes=[CLOUD_PLATFORM]),
        "SignatureDoesNotMatch")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
