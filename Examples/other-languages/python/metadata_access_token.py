#!/usr/bin/env python3
"""An access token from fleet-tokend's GCE metadata endpoint, through Google's own auth library
(google-auth) as it is: the worker's code is what it would be on Compute Engine, only its
environment names the agent's endpoint (README, "From other languages"; docs/OPERATIONS.md, "The
GCE metadata endpoint"):

    pip install google-auth requests
    GCE_METADATA_HOST=127.0.0.1:8989 GCE_METADATA_IP=127.0.0.1:8989 NO_PROXY=127.0.0.1,localhost \\
        python3 metadata_access_token.py

The agent answers with its `metadata_server.default` entry's cached token (one IAM call per
lifetime for the whole host), to the users that entry's `allow` names. The test suite runs this file
against a real agent (Tests/IntegrationTests/OtherLanguagesTests.swift).
"""

import google.auth
import google.auth.transport.requests

credentials, project = google.auth.default()  # finds "Compute Engine": the agent's endpoint
credentials.refresh(google.auth.transport.requests.Request())
# As on Compute Engine: `Authorization: Bearer <credentials.token>`, or `credentials` handed to a
# Google client library, which refreshes them ahead of their expiry.
print(f"{credentials.service_account_email} in {project}: an access token until {credentials.expiry:%Y-%m-%dT%H:%M:%SZ}")
