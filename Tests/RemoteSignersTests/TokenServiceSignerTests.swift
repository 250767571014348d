import Egress
import FleetAuth
import FleetEngineEmulator
import FleetModel
import Foundation
import HTTPServing
import JSON
import RemoteSigners
import Testing

@Suite struct TokenServiceSignerTests {
    let vehicle = VehicleIdentity(kind: .vehicle, id: "veh 7/ä")

    func signer(_ baseURL: String, timeout: Duration = .seconds(10),
                _ configure: (inout TokenServiceSigner.Configuration) -> Void = { _ in }) -> TokenServiceSigner {
        var configuration = TokenServiceSigner.Configuration(url: baseURL + TokenServiceEmulator.path)
        configure(&configuration)
        return TokenServiceSigner(configuration: configuration, http: SignerHTTP(timeout: timeout))
    }

    @Test func mintsATokenFleetEngineAcceptsForThatVehicle() async throws {
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key)
        try await withPeers([service]) { url in
            let signer = signer(url)
            let token = try await signer.mint(for: vehicle)
            let verifier = TokenVerifier(publicKey: SignerKeys.fleet.key.privateKey, keyId: "fleet-kid",
                                         serviceAccount: SignerKeys.fleet.key.clientEmail)
            #expect(verifier.verify(authorizationHeader: "Bearer " + token.token, vehicle: vehicle) == nil)
            #expect(token.expiresAt == (try JWT.decode(token.token).claims["exp"]?.numberValue).map(Int64.init))
            #expect(service.statistics.issuedPerVehicle == [vehicle.id: 1])
        }
    }

    @Test func sendsTheConfiguredHeaderAndIsRefusedWithoutIt() async throws {
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key, requiredHeader: ("X-Api-Key", "s3cret-value"))
        try await withPeers([service]) { url in
            let withHeader = signer(url) { $0.header = ("X-Api-Key", "s3cret-value") }
            _ = try await withHeader.mint(for: vehicle)
            let error = try await #require(throws: SignerError.self) { try await signer(url).mint(for: vehicle) }
            #expect(error.reason == .refused)
            #expect(error.description == "token-service signer: token service answered HTTP 401: Missing or wrong X-Api-Key header.")
            #expect(!error.description.contains("s3cret"))
            #expect(service.statistics.unauthorized == 1)
        }
    }

    @Test func readsConfiguredFieldNamesAndRelativeExpiry() async throws {
        var format = TokenServiceEmulator.AnswerFormat()
        format.tokenField = "jwt"
        format.expiryField = "expires_in"
        format.secondsFromNow = true
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key, format: format)
        try await withPeers([service]) { url in
            let configured = signer(url) {
                $0.tokenField = "jwt"
                $0.expiryField = "expires_in"
                $0.expiryFormat = .secondsFromNow
            }
            let token = try await configured.mint(for: vehicle)
            #expect(token.expiresAt > systemEpochClock() + 3500)
            // With the default names the same answer is unusable, and the error says which flag to look at.
            let error = try await #require(throws: SignerError.self) { try await signer(url).mint(for: vehicle) }
            #expect(error.reason == .badResponse)
            #expect(error.message.contains("--token-field"))
            // Relative expiry read as epoch seconds disagrees with the token's exp.
            let misread = try await #require(throws: SignerError.self) {
                try await signer(url) { $0.tokenField = "jwt"; $0.expiryField = "expires_in" }.mint(for: vehicle)
            }
            #expect(misread.reason == .rejectedToken)
            #expect(misread.message.contains("does not match its exp claim"))
        }
    }

    @Test func neverHandsOutATokenForAnotherVehicleOrAnUnrequestedWildcard() async throws {
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key)
        try await withPeers([service]) { url in
            service.behaviour = .wrongVehicle
            let wrong = try await #require(throws: SignerError.self) { try await signer(url).mint(for: vehicle) }
            #expect(wrong.reason == .rejectedToken)
            #expect(wrong.message.contains("names vehicleid veh 7/ä-other"))
            service.behaviour = .wildcard
            let wildcard = try await #require(throws: SignerError.self) { try await signer(url).mint(for: vehicle) }
            #expect(wildcard.message.contains("wildcard tokens are not configured"))
            // Asked for the wildcard (--token-scope wildcard), a wildcard token is what is wanted.
            _ = try await signer(url).mint(for: VehicleIdentity(kind: .vehicle, id: "*"))
        }
    }

    @Test func anOutageIsReportedAsUnavailable() async throws {
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key)
        try await withPeers([service]) { url in
            service.behaviour = .down
            let error = try await #require(throws: SignerError.self) { try await signer(url).mint(for: vehicle) }
            #expect(error.reason == .unavailable)
        }
        let unreachable = try await #require(throws: SignerError.self) {
            try await signer("http://127.0.0.1:1", timeout: .seconds(1)).mint(for: vehicle)
        }
        #expect(unreachable.reason == .unavailable)
        #expect(unreachable.message.hasPrefix("cannot reach token service") || unreachable.message.contains("did not answer"))
    }

    @Test func theCacheMintsOncePerVehicleUnderAThousandConcurrentRequests() async throws {
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key)
        try await withPeers([service]) { url in
            let cache = TokenCache(signer: signer(url))
            let vehicles = (0..<10).map { VehicleIdentity(kind: .deliveryVehicle, id: "dv-\($0)") }
            let tokens = try await withThrowingTaskGroup(of: (String, String).self) { group in
                for request in 0..<1000 {
                    let vehicle = vehicles[request % vehicles.count]
                    group.addTask { (vehicle.id, try await cache.token(for: vehicle)) }
                }
                return try await group.reduce(into: [String: Set<String>]()) { $0[$1.0, default: []].insert($1.1) }
            }
            #expect(service.statistics.tokensIssued == 10)
            #expect(service.statistics.issuedPerVehicle == Dictionary(uniqueKeysWithValues: vehicles.map { ($0.id, 1) }))
            #expect(tokens.count == 10 && tokens.values.allSatisfy { $0.count == 1 })
        }
    }
}

/// A private token service over HTTPS: verified against `--ca-file`, never trusted blindly.
@Suite struct TokenServiceOverHTTPSTests {
    @Test func mintsOverHTTPSOnlyWithTheServiceCAAndSaysWhyOtherwise() async throws {
        let tlsDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("signer-tls-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: tlsDirectory) }
        let tls = try ThrowawayTLS.generate(in: tlsDirectory)
        let service = TokenServiceEmulator(key: SignerKeys.fleet.key)
        let server = try await EmulatorHost.start([service], options: .init(tls: try tls.serverTLS()))
        defer { Task { await server.shutdown() } }
        let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-tls")
        let configuration = TokenServiceSigner.Configuration(url: server.baseURL + TokenServiceEmulator.path)
        #expect(server.baseURL.hasPrefix("https://"))

        let untrusting = TokenServiceSigner(configuration: configuration, http: SignerHTTP(egress: .standard))
        let error = try await #require(throws: SignerError.self) { try await untrusting.mint(for: vehicle) }
        #expect(error.reason == .unavailable)
        #expect(error.description.contains("certificate verify failed"), "\(error.description)")
        #expect(service.statistics.issuedPerVehicle.isEmpty)

        let trusting = TokenServiceSigner(configuration: configuration,
                                          http: SignerHTTP(egress: try Egress.load(caFiles: [tls.caFile])))
        _ = try await trusting.mint(for: vehicle)
        #expect(service.statistics.issuedPerVehicle == [vehicle.id: 1])
    }
}
