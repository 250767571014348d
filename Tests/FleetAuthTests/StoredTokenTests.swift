@testable import FleetAuth
import FleetModel
import Testing

/// The cache keeps tokens decoded; what it hands out must be the issued text, byte for byte.
@Suite struct StoredTokenTests {
    @Test func anRS256TokenComesBackAsIssuedAndSharesTheStartOfTheOneBefore() async throws {
        let signer = LocalKeySigner(key: TestKeys.key)
        let first = try await signer.mint(for: VehicleIdentity(kind: .vehicle, id: "veh-1"))
        let second = try await signer.mint(for: VehicleIdentity(kind: .deliveryVehicle, id: "veh-2"))
        let storedFirst = StoredToken(first, sharing: nil)
        let storedSecond = StoredToken(second, sharing: storedFirst.shared)
        #expect(storedFirst.issued.text == first.token)
        #expect(storedSecond.issued.text == second.token)
        #expect(storedSecond.expiresAt == second.expiresAt)
        let shared = try #require(storedFirst.shared)
        #expect(storedSecond.shared === shared, "issuer, subject and audience are kept once")
        #expect(shared.header == String(first.token.prefix { $0 != "." }))
    }

    /// What a request's header block gets: the issued text, written in place, exactly
    /// `utf8Count` bytes of it (the bytes after it untouched), for a JWT and an opaque token.
    @Test func aTokenWritesItsIssuedTextInPlace() async throws {
        let issued = try await LocalKeySigner(key: TestKeys.key).mint(for: VehicleIdentity(kind: .vehicle, id: "veh-1"))
        for token in [issued.token, "opaque-token-from-a-token-service"] {
            let text = StoredToken(VehicleToken(token: token, expiresAt: 60), sharing: nil).issued
            #expect(text.utf8Count == token.utf8.count)
            var memory = [UInt8](repeating: 0xEE, count: text.utf8Count + 8)
            memory.withUnsafeMutableBytes { text.write(into: $0) }
            #expect(String(decoding: memory.prefix(text.utf8Count), as: UTF8.self) == token)
            #expect(memory.suffix(8).allSatisfy { $0 == 0xEE })
        }
    }

    /// A token of another signer, or with little in common, starts a shared part of its own.
    @Test func aTokenWithLittleInCommonSharesNothing() async throws {
        let first = try await LocalKeySigner(key: TestKeys.key).mint(for: VehicleIdentity(kind: .vehicle, id: "veh-1"))
        let storedFirst = StoredToken(first, sharing: nil)
        let other = "e30.eyJ4IjoxfQ.c2ln"  // {} . {"x":1} . "sig"
        let storedOther = StoredToken(VehicleToken(token: other, expiresAt: 60), sharing: storedFirst.shared)
        #expect(storedOther.issued.text == other)
        let otherShared = try #require(storedOther.shared, "kept decoded")
        #expect(otherShared !== storedFirst.shared)
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
        let stored = StoredToken(VehicleToken(token: token, expiresAt: 60),
                                 sharing: SharedTokenPart(header: "e30", payloadStart: Array("{}".utf8)))
        #expect(stored.issued.text == token)
    }

    @Test func encodingIntoABufferMatchesTheEncoder() {
        for count in 0..<40 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let text = String(unsafeUninitializedCapacity: Base64URL.encodedCount(count)) {
                Base64URL.encode(bytes[...], into: $0)
            }
            #expect(text == Base64URL.encode(bytes))
            #expect(Base64URL.decode(text) == bytes)
            #expect(Array(text.utf8).withUnsafeBufferPointer(Base64URL.decodeExactly) == bytes)
        }
    }

    /// Stray bits in the last character decode, but not exactly: they would not encode back.
    @Test func strayBitsDecodeButNotExactly() {
        for (text, bytes) in [("c2lnbh", Array("sign".utf8)), ("YR", [0x61]), ("YWJ", [0x61, 0x62])] {
            #expect(Base64URL.decode(text) == bytes)
            #expect(Array(text.utf8).withUnsafeBufferPointer(Base64URL.decodeExactly) == nil, "\(text)")
            #expect(Base64URL.encode(bytes) != text)
        }
        #expect(Array("c2lnbg".utf8).withUnsafeBufferPointer(Base64URL.decodeExactly) == Array("sign".utf8))
        #expect(Array("a!b".utf8).withUnsafeBufferPointer(Base64URL.decodeExactly) == nil)
        #expect(Array("abcde".utf8).withUnsafeBufferPointer(Base64URL.decodeExactly) == nil, "an impossible length")
    }
}
