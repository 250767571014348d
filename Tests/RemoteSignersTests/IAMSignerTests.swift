import FleetAuth
import FleetEngineEmulator
import FleetModel
import JSON
import RemoteSigners
import Testing

@Suite struct IAMSignerTests {
    let vehicle = VehicleIdentity(kind: .deliveryVehicle, id: "dv-42")
    let fleetVerifier = TokenVerifier(publicKey: SignerKeys.fleet.key.privateKey, keyId: "fleet-kid",
                                      serviceAccount: SignerKeys.fleet.key.clientEmail)

    /// An IAM signer on Application Default Credentials resolved from `environment`.
    func signer(_ baseURL: String, environment: [String: String], clock: @escaping EpochClock = systemEpochClock,
                serviceAccount: String = SignerKeys.fleet.key.clientEmail,
                timeout: Duration = .seconds(10)) throws -> (IAMSigner, CachedAccessToken) {
        let http = SignerHTTP(timeout: timeout)
        let credentials = try ApplicationDefaultCredentials.resolve(environment: environment, http: http, clock: clock)
        let cached = CachedAccessToken(source: credentials.source, clock: clock)
        return (IAMSigner(serviceAccount: serviceAccount, iamURL: baseURL, credentials: cached, http: http, clock: clock), cached)
    }

    func metadataEnvironment(_ baseURL: String) -> [String: String] {
        ["GCE_METADATA_HOST": String(baseURL.dropFirst("http://".count))]
    }

    @Test func signsThroughSignJwtWithAMetadataServerAccessToken() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key)
        try await withPeers([google]) { url in
            let (signer, _) = try signer(url, environment: metadataEnvironment(url))
            for id in 0..<5 {
                let identity = VehicleIdentity(kind: .deliveryVehicle, id: "dv-\(id)")
                let token = try await signer.mint(for: identity)
                #expect(fleetVerifier.verify(authorizationHeader: "Bearer " + token.token, vehicle: identity) == nil)
                #expect(try JWT.decode(token.token).claims["authorization"] == .object(["deliveryvehicleid": .string("dv-\(id)")]))
            }
            // One access token serves every signJwt call.
            #expect(google.statistics.accessTokensFromMetadata == 1)
            #expect(google.statistics.signedTokens == 5)
            #expect(google.statistics.signJwtUnauthenticated == 0)
        }
    }

    @Test func metadataServerNamesTheServiceAccountAndProject() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key)
        try await withPeers([google]) { url in
            let metadata = MetadataServer(host: String(url.dropFirst("http://".count)), http: SignerHTTP())
            let (email, project) = (try await metadata.serviceAccountEmail(), try await metadata.projectId())
            #expect(email == SignerKeys.fleet.key.clientEmail)
            #expect(project == "signer-project")
        }
    }

    @Test func signsWithAccessTokensFromAKeyFileGrant() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key, callerKey: SignerKeys.caller.key)
        try await withPeers([google]) { url in
            let keyFile = SignerKeys.caller.write(tokenEndpointBase: url)
            let resolved = try ApplicationDefaultCredentials.resolve(
                environment: ["GOOGLE_APPLICATION_CREDENTIALS": keyFile], http: SignerHTTP())
            #expect(resolved.serviceAccount == SignerKeys.caller.key.clientEmail)
            #expect(resolved.keyFile == keyFile)
            let (signer, _) = try signer(url, environment: ["GOOGLE_APPLICATION_CREDENTIALS": keyFile])
            let token = try await signer.mint(for: vehicle)
            _ = try await signer.mint(for: VehicleIdentity(kind: .vehicle, id: "v-1"))
            #expect(fleetVerifier.verify(authorizationHeader: "Bearer " + token.token, vehicle: vehicle) == nil)
            #expect(google.statistics.accessTokensFromGrants == 1)
            #expect(google.statistics.accessTokensFromMetadata == 0)
        }
    }

    @Test func aGrantWithAnUnknownKeyIsACredentialsError() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key, callerKey: SignerKeys.caller.key)
        try await withPeers([google]) { url in
            // The fleet key is not the caller the endpoint accepts.
            let keyFile = SignerKeys.fleet.write(tokenEndpointBase: url)
            let (signer, _) = try signer(url, environment: ["GOOGLE_APPLICATION_CREDENTIALS": keyFile])
            let error = try await #require(throws: SignerError.self) { try await signer.mint(for: vehicle) }
            #expect(error.reason == .credentials)
            #expect(error.message.contains("OAuth token endpoint answered HTTP 400: invalid_grant: Invalid JWT Signature."))
            #expect(google.statistics.signJwtRequests == 0)
        }
    }

    @Test func accessTokensAreReusedUntilFourMinutesBeforeExpiry() async throws {
        let clock = ManualClock()
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key, accessTokenLifetime: 600, clock: clock.epochClock)
        try await withPeers([google]) { url in
            let (signer, cached) = try signer(url, environment: metadataEnvironment(url), clock: clock.epochClock)
            _ = try await signer.mint(for: vehicle)
            clock.advance(by: 600 - 240 - 1)
            _ = try await signer.mint(for: vehicle)
            #expect(await cached.fetchCount == 1)
            clock.advance(by: 1)
            _ = try await signer.mint(for: vehicle)
            #expect(await cached.fetchCount == 2)
            #expect(google.statistics.accessTokensFromMetadata == 2)
        }
    }

    @Test func aRevokedAccessTokenIsReplacedOnce() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key)
        try await withPeers([google]) { url in
            let (signer, cached) = try signer(url, environment: metadataEnvironment(url))
            _ = try await signer.mint(for: vehicle)
            google.revokeAccessTokens()
            _ = try await signer.mint(for: vehicle)
            #expect(await cached.fetchCount == 2)
            #expect(google.statistics.signJwtUnauthenticated == 1)
        }
    }

    @Test func refusalsAndOutagesAreToldApart() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key)
        try await withPeers([google]) { url in
            let (other, _) = try signer(url, environment: metadataEnvironment(url),
                                        serviceAccount: "someone-else@signer-project.iam.gserviceaccount.com")
            let refused = try await #require(throws: SignerError.self) { try await other.mint(for: vehicle) }
            #expect(refused.reason == .refused)
            #expect(refused.message.contains("HTTP 403: Permission 'iam.serviceAccounts.signJwt' denied"))
            google.signJwtDown = true
            let (signer, _) = try signer(url, environment: metadataEnvironment(url))
            let down = try await #require(throws: SignerError.self) { try await signer.mint(for: vehicle) }
            #expect(down.reason == .unavailable)
        }
        let (unreachable, _) = try signer("http://127.0.0.1:1", environment: ["GCE_METADATA_HOST": "127.0.0.1:1"],
                                        timeout: .seconds(1))
        let noCredentials = try await #require(throws: SignerError.self) { try await unreachable.mint(for: vehicle) }
        #expect(noCredentials.reason == .credentials)
        #expect(noCredentials.message.hasPrefix("no access token from metadata server http://127.0.0.1:1/computeMetadata/v1"))
    }

    @Test func theCacheMintsOncePerVehicleUnderAThousandConcurrentRequests() async throws {
        let google = GoogleAuthEmulator(signingKey: SignerKeys.fleet.key)
        try await withPeers([google]) { url in
            let (signer, _) = try signer(url, environment: metadataEnvironment(url))
            let cache = TokenCache(signer: signer)
            let vehicles = (0..<10).map { VehicleIdentity(kind: .vehicle, id: "v-\($0)") }
            try await withThrowingDiscardingTaskGroup { group in
                for request in 0..<1000 {
                    group.addTask { _ = try await cache.token(for: vehicles[request % vehicles.count]) }
                }
            }
            #expect(google.statistics.signedTokens == 10)
            #expect(google.statistics.accessTokensFromMetadata == 1)
        }
    }

    @Test func aMissingCredentialsFileIsNamed() {
        let error = #expect(throws: SignerError.self) {
            try ApplicationDefaultCredentials.resolve(environment: ["GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/adc.json"],
                                                      http: SignerHTTP())
        }
        #expect(error?.message == "GOOGLE_APPLICATION_CREDENTIALS: key file /nonexistent/adc.json: no such file")
    }
}
