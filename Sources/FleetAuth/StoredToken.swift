/// What consecutive tokens of one signer have in common: the header and the start of the
/// payload (issuer, subject, audience, often the first digits of the issue time). Stored once
/// and referenced by every token that shares it.
final class SharedTokenPart: Sendable {
    let header: String
    let payloadStart: [UInt8]

    init(header: String, payloadStart: [UInt8]) {
        self.header = header
        self.payloadStart = payloadStart
    }
}

/// A vehicle token as `TokenCache` keeps it, one per active vehicle: its text, kept compactly
/// (`TokenText`), and its expiry.
struct StoredToken {
    /// The issued token's text.
    let issued: TokenText
    /// Expiry in seconds since the epoch.
    let expiresAt: Int64

    /// - Parameter sharing: the part of the token stored before; used when this one has enough in common with it.
    init(_ token: VehicleToken, sharing previous: SharedTokenPart?) {
        expiresAt = token.expiresAt
        issued = TokenText(token.token, sharing: previous)
        assert(issued.text == token.token, "a JWT's parts decoded exactly encode back to its text")
    }

    /// The part this token shares, for the next token to share.
    var shared: SharedTokenPart? { issued.shared }
}

/// A token's text as `TokenCache` keeps it. A JWT is kept decoded from base64url (three
/// quarters of its text) and what it has in common with the token stored before it
/// (`SharedTokenPart`: the header and about 130 bytes of an RS256 vehicle token's payload) is
/// kept once: about 350 instead of 610 bytes per token. The text is written out for each use,
/// about a microsecond: straight into a request's header block (`write(into:)`), or as a
/// `String`. A token that is not three base64url parts (a token service may hand out anything)
/// is kept as it came.
public struct TokenText: Sendable {
    private enum Form {
        /// The payload is `shared.payloadStart[..<sharedCount]` followed by `rest[..<payloadRestCount]`;
        /// the signature is the rest of `rest`.
        case jwt(shared: SharedTokenPart, rest: [UInt8], sharedCount: UInt16, payloadRestCount: UInt16)
        case text(String)
    }

    private let form: Form

    /// A shorter common start is not worth a reference: the token starts a part of its own.
    static let minimumSharedCount = 16

    init(_ token: String, sharing previous: SharedTokenPart?) {
        var issued = token  // `withUTF8` may make the text contiguous, so it takes a `var`
        guard let (header, payload, signature) = issued.withUTF8(Self.parts) else {
            form = .text(token)
            return
        }
        let (shared, sharedCount): (SharedTokenPart, Int)
        if let previous, previous.header == header,
           case let common = Self.commonStartCount(previous.payloadStart, payload), common >= Self.minimumSharedCount {
            (shared, sharedCount) = (previous, common)
        } else {
            (shared, sharedCount) = (SharedTokenPart(header: header, payloadStart: payload), payload.count)
        }
        var rest: [UInt8] = []
        rest.reserveCapacity(payload.count - sharedCount + signature.count)
        rest += payload[sharedCount...]
        rest += signature
        form = .jwt(shared: shared, rest: rest, sharedCount: UInt16(sharedCount),
                    payloadRestCount: UInt16(payload.count - sharedCount))
    }

    /// How many bytes the two begin with alike; counted in place (a zip's prefix gathered its pairs in an array).
    private static func commonStartCount(_ first: [UInt8], _ second: [UInt8]) -> Int {
        let limit = min(first.count, second.count)
        var count = 0
        while count < limit, first[count] == second[count] { count += 1 }
        return count
    }

    /// A JWT's header text and its payload's and signature's bytes, when the two decode exactly
    /// (no stray bits in their last characters), and so encode back to the same text; nil for
    /// anything else. Read in the token's UTF-8 in place: this runs for every token minted.
    private static func parts(of utf8: UnsafeBufferPointer<UInt8>) -> (header: String, payload: [UInt8], signature: [UInt8])? {
        let dot = UInt8(ascii: ".")
        guard let first = utf8.firstIndex(of: dot), let second = utf8[(first + 1)...].firstIndex(of: dot),
              let payload = Base64URL.decodeExactly(UnsafeBufferPointer(rebasing: utf8[(first + 1)..<second])),
              let signature = Base64URL.decodeExactly(UnsafeBufferPointer(rebasing: utf8[(second + 1)...])),
              payload.count <= Int(UInt16.max), signature.count <= Int(UInt16.max) else { return nil }
        return (String(decoding: UnsafeBufferPointer(rebasing: utf8[..<first]), as: UTF8.self), payload, signature)
    }

    /// The part this token shares, for the next token to share.
    fileprivate var shared: SharedTokenPart? {
        if case .jwt(let shared, _, _, _) = form { return shared }
        return nil
    }

    /// The length of the text in bytes.
    public var utf8Count: Int {
        switch form {
        case .text(let text):
            return text.utf8.count
        case .jwt(let shared, let rest, let sharedCount, let payloadRestCount):
            let payloadCount = Int(sharedCount) + Int(payloadRestCount)
            let signatureCount = rest.count - Int(payloadRestCount)
            return shared.header.utf8.count + 2 + Base64URL.encodedCount(payloadCount) + Base64URL.encodedCount(signatureCount)
        }
    }

    /// Writes the text to the start of `output`, which holds at least `utf8Count` bytes.
    public func write(into output: UnsafeMutableRawBufferPointer) {
        let output = output.bindMemory(to: UInt8.self)
        switch form {
        case .text(var text):
            text.withUTF8 { _ = output.initialize(fromContentsOf: $0) }
        case .jwt(let shared, let rest, let sharedCount, let payloadRestCount):
            let (sharedCount, payloadCount) = (Int(sharedCount), Int(sharedCount) + Int(payloadRestCount))
            var written = output.initialize(fromContentsOf: shared.header.utf8)
            output[written] = UInt8(ascii: ".")
            written += 1
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: payloadCount) { payload in
                _ = UnsafeMutableBufferPointer(rebasing: payload[..<sharedCount])
                    .initialize(fromContentsOf: shared.payloadStart[..<sharedCount])
                _ = UnsafeMutableBufferPointer(rebasing: payload[sharedCount...])
                    .initialize(fromContentsOf: rest[..<Int(payloadRestCount)])
                written += Base64URL.encode(UnsafeBufferPointer(payload), into: UnsafeMutableBufferPointer(rebasing: output[written...]))
            }
            output[written] = UInt8(ascii: ".")
            written += 1
            _ = Base64URL.encode(rest[Int(payloadRestCount)...], into: UnsafeMutableBufferPointer(rebasing: output[written...]))
        }
    }

    /// The token as issued.
    public var text: String {
        if case .text(let text) = form { return text }
        let count = utf8Count
        return String(unsafeUninitializedCapacity: count) { output in
            write(into: UnsafeMutableRawBufferPointer(output))
            return count
        }
    }
}
