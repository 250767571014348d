import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import JSON
import Synchronization
import Testing

/// The emulator must refuse exactly what Fleet Engine refuses; these drive it
/// over HTTP with the real client.
@Suite(.serialized) struct EmulatorTokenCheckTests {
    static let key = try! ServiceAccountKey.parse(Array(ServiceAccountKey.generateKeyFileJSON(
        projectId: "emu-project", clientEmail: "relay@emu-project.iam.gserviceaccount.com", privateKeyId: "kid-1")!.utf8),
        source: "test")
    static let otherKey = try! ServiceAccountKey.parse(Array(ServiceAccountKey.generateKeyFileJSON(
        projectId: "emu-project", clientEmail: "relay@emu-project.iam.gserviceaccount.com", privateKeyId: "kid-1")!.utf8),
        source: "test")

    let fix = LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: 1_795_381_200_000)

    func withEmulator(requireExisting: Bool = false,
                      _ body: (FleetEngineEmulator, FleetEngineClient) async throws -> Void) async throws {
        let emulator = FleetEngineEmulator(key: Self.key, provider: "emu-project", requireExistingVehicles: requireExisting)
        let url = try await emulator.start()
        let client = FleetEngineClient(configuration: .init(baseURL: url, provider: "emu-project"))
        do {
            try await body(emulator, client)
        } catch {
            await client.shutdown(); await emulator.shutdown(); throw error
        }
        await client.shutdown()
        await emulator.shutdown()
    }

    func token(_ claims: String, key: ServiceAccountKey = key, kid: String = "kid-1") -> String {
        JWT.signRS256(headerJSON: FleetEngineClaims.headerJSON(keyId: kid), claimsJSON: claims, key: key.privateKey)!
    }

    func claims(kind: VehicleKind = .vehicle, id: String = "veh-1", iat: Int64? = nil, lifetime: Int64 = 3600,
                email: String = key.clientEmail, audience: String = FleetEngineClaims.audience) -> String {
        let issuedAt = iat ?? Int64(Date().timeIntervalSince1970)
        return FleetEngineClaims.claimsJSON(serviceAccount: email, kind: kind, vehicleId: id, issuedAt: issuedAt,
                                            lifetimeSeconds: lifetime)
            .replacingOccurrences(of: FleetEngineClaims.audience, with: audience)
            .replacingOccurrences(of: "\"exp\":\(issuedAt + min(lifetime, 3600))", with: "\"exp\":\(issuedAt + lifetime)")
    }

    func send(_ client: FleetEngineClient, kind: VehicleKind = .vehicle, id: String = "veh-1", token: String) async -> Int {
        let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: kind, id: id), lastLocation: fix)
        return await client.send(update, token: token).status
    }

    @Test func acceptsAValidTokenForBothKindsAndStoresTheVehicle() async throws {
        try await withEmulator { emulator, client in
            #expect(await send(client, token: token(claims())) == 200)
            #expect(await send(client, kind: .deliveryVehicle, token: token(claims(kind: .deliveryVehicle))) == 200)
            let stored = try #require(emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "veh-1")))
            #expect(stored.locationTimeMilliseconds == 1_795_381_200_000)
            let fetched = await client.fetchVehicle(VehicleIdentity(kind: .vehicle, id: "veh-1"), token: token(claims()))
            #expect(fetched.status == 200)
            #expect(fetched.locationMilliseconds == 1_795_381_200_000)
        }
    }

    @Test func answers401ForInvalidTokens() async throws {
        let now = Int64(Date().timeIntervalSince1970)
        try await withEmulator { _, client in
            #expect(await send(client, token: "") == 401)
            #expect(await send(client, token: "not.a.jwt") == 401)
            #expect(await send(client, token: token(claims(), kid: "other-kid")) == 401)
            #expect(await send(client, token: token(claims(), key: Self.otherKey)) == 401)
            #expect(await send(client, token: token(claims(email: "someone@else.iam.gserviceaccount.com"))) == 401)
            #expect(await send(client, token: token(claims(audience: "https://example.com/"))) == 401)
            #expect(await send(client, token: token(claims(iat: now - 5000))) == 401)  // expired
            #expect(await send(client, token: token(claims(iat: now + 3600))) == 401)  // issued in the future
            #expect(await send(client, token: token(claims(lifetime: 3601))) == 401)  // lives longer than an hour
        }
    }

    @Test func answers403WhenTheClaimDoesNotCoverTheVehicle() async throws {
        try await withEmulator { _, client in
            #expect(await send(client, id: "veh-2", token: token(claims(id: "veh-1"))) == 403)
            #expect(await send(client, token: token(claims(kind: .deliveryVehicle))) == 403)
            #expect(await send(client, token: token(claims(id: "*"))) == 200)
        }
    }

    @Test func answers400ForInvalidBodiesAnd404ForUnknownVehiclesWhenStrict() async throws {
        try await withEmulator(requireExisting: true) { emulator, client in
            let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-1")
            let good = await send(client, token: token(claims()))
            #expect(good == 404)
            emulator.createVehicle(vehicle)
            #expect(await send(client, token: token(claims())) == 200)
            let badFix = LocationFix(latitude: 91, longitude: 2, recordedAtMilliseconds: 0)
            let response = await client.send(VehicleLocationUpdate(vehicle: vehicle, lastLocation: badFix), token: token(claims()))
            #expect(response.status == 400)
            #expect(response.outcome == .rejected(.invalid))
            #expect(response.message.contains("LatLng"))
        }
    }

    @Test func injectedFaultsCarryRetryAfter() async throws {
        try await withEmulator { emulator, client in
            emulator.injectFaults(.init(status: 503, retryAfter: "3"), count: 1)
            let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "veh-1"), lastLocation: fix)
            let first = await client.send(update, token: token(claims()))
            #expect(first.outcome == .transient(cause: .status(503), retryAfterSeconds: 3))
            #expect(await client.send(update, token: token(claims())).outcome == .accepted)
        }
    }
}

@Suite struct TokenVerifierMemoryTests {
    @Test func aRememberedSignatureStillHasItsClaimsCheckedEveryTime() throws {
        let key = EmulatorTokenCheckTests.key
        let now = Mutex<Int64>(1_800_000_000)
        let verifier = TokenVerifier(publicKey: key.privateKey, keyId: "kid-1", serviceAccount: key.clientEmail,
                                     remembersSignatures: true, clock: { now.withLock { $0 } })
        let claims = FleetEngineClaims.claimsJSON(serviceAccount: key.clientEmail, kind: .vehicle, vehicleId: "veh-1",
                                                  issuedAt: 1_800_000_000, lifetimeSeconds: 3600)
        let token = JWT.signRS256(headerJSON: FleetEngineClaims.headerJSON(keyId: "kid-1"), claimsJSON: claims, key: key.privateKey)!
        let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-1")
        #expect(verifier.verify(authorizationHeader: "Bearer " + token, vehicle: vehicle) == nil)
        #expect(verifier.verify(authorizationHeader: "Bearer " + token, vehicle: vehicle) == nil)
        #expect(verifier.verify(authorizationHeader: "Bearer " + token, vehicle: VehicleIdentity(kind: .vehicle, id: "veh-2"))
            == .permissionDenied("JWT does not authorize vehicleid veh-2."))
        var tampered = Array(token.utf8)
        tampered[tampered.count - 2] = tampered[tampered.count - 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(verifier.verify(authorizationHeader: "Bearer " + String(decoding: tampered, as: UTF8.self), vehicle: vehicle)
            == .unauthenticated("JWT signature is invalid."))
        now.withLock { $0 += 3600 + 601 }
        #expect(verifier.verify(authorizationHeader: "Bearer " + token, vehicle: vehicle) == .unauthenticated("JWT has expired."))
    }

    /// A client that hands out expired tokens must be caught, not excused by a leeway of minutes.
    @Test func expiryIsStrictToTheSecond() throws {
        let key = EmulatorTokenCheckTests.key
        let now = Mutex<Int64>(1_800_000_000)
        let verifier = TokenVerifier(publicKey: key.privateKey, keyId: "kid-1", serviceAccount: key.clientEmail,
                                     clock: { now.withLock { $0 } })
        let claims = FleetEngineClaims.claimsJSON(serviceAccount: key.clientEmail, kind: .vehicle, vehicleId: "veh-1",
                                                  issuedAt: 1_800_000_000, lifetimeSeconds: 60)
        let header = "Bearer " + JWT.signRS256(headerJSON: FleetEngineClaims.headerJSON(keyId: "kid-1"), claimsJSON: claims, key: key.privateKey)!
        let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-1")
        now.withLock { $0 += 59 }
        #expect(verifier.verify(authorizationHeader: header, vehicle: vehicle) == nil, "valid in its last second")
        now.withLock { $0 += 1 }
        #expect(verifier.verify(authorizationHeader: header, vehicle: vehicle) == .unauthenticated("JWT has expired."), "refused at exp")
    }
}
