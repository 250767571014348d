@testable import FleetAuth
import Testing

/// The cache keeps tokens decoded; what it hands out must be the issued text, byte for byte.
@Suite struct StoredTokenTests {
    @Test func anRS256TokenComesBackAsIssuedAndSharesTheHeaderOfTheOneBefore() async throws {
        let signer = LocalKeySigner(key: TestKeys.key)
        let first = try await signer.mint(for: VehicleIdentity(kind: .vehicle, id: "veh-1"))
        let second = try await signer.mint(for: VehicleIdentity(kind: .deliveryVehicle, id: "veh-2"))
        let storedFirst = StoredToken(first, sharedHeader: nil)
        let storedSecond = StoredToken(second, sharedHeader: storedFirst.header)
        #expect(storedFirst.text == first.token)
        #expect(storedSecond.text == second.token)
        #expect(storedSecond.expiresAt == second.expiresAt)
        #expect(storedFirst.header == String(first.token.prefix { $0 != "." }))
    }

    @Test(arguments: [
        "opaque-token-from-a-token-service",
        "a.b",
        "e30.e30.e30.e30",
        "e30.!!!.c2ln",
        // Stray bits in the last character: decodable, but it would not re-encode the same.
        "e30.e30.c2lnbh",
        "",
    ])
    func anythingElseIsKeptAsItCame(token: String) {
        let stored = StoredToken(VehicleToken(token: token, expiresAt: 60), sharedHeader: "e30")
        #expect(stored.text == token)
    }

    @Test func encodingIntoABufferMatchesTheEncoder() {
        for count in 0..<40 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let text = String(unsafeUninitializedCapacity: Base64URL.encodedCount(count)) {
                Base64URL.encode(bytes[...], into: $0)
            }
            #expect(text == Base64URL.encode(bytes))
            #expect(Base64URL.decode(text) == bytes)
        }
    }
}
