import NIOCore

/// A request's header block in HPACK (RFC 7541), written straight from the request: names
/// from the static table where it has them, values as plain literals that never enter the
/// dynamic table. Nothing is Huffman-coded and nothing is looked up: encoding is copying.
///
/// The relay's requests differ in the path and the token, which no table would serve; the
/// few values that repeat (method, scheme, authority, content type) cost a few bytes more
/// than indexed ones would. The token goes never-indexed (§7.1.3), so that no intermediary
/// compresses it either.
enum RequestHeaderBlock {
    /// Static table entries (RFC 7541 Appendix A).
    private enum Static {
        static let authority = 1, methodGET = 2, methodPOST = 3, method = 2, path = 4, schemeHTTPS = 7
        static let authorization = 23, contentLength = 28, contentType = 31
    }

    static func write(_ request: EgressRequest, authority: String, into block: inout ByteBuffer) {
        switch request.method {
        case "POST": writeIndexed(Static.methodPOST, into: &block)
        case "GET": writeIndexed(Static.methodGET, into: &block)
        default: writeLiteral(nameIndex: Static.method, value: request.method, into: &block)
        }
        writeIndexed(Static.schemeHTTPS, into: &block)
        writeLiteral(nameIndex: Static.authority, value: authority, into: &block)
        writeLiteral(nameIndex: Static.path, path: request.path, into: &block)
        if let authorization = request.authorization {
            writeLiteral(nameIndex: Static.authorization, value: authorization, neverIndexed: true, into: &block)
        } else if let token = request.bearerToken {
            writeLiteral(nameIndex: Static.authorization, valueStart: "Bearer ", token: token, into: &block)
        }
        if let contentType = request.contentType { writeLiteral(nameIndex: Static.contentType, value: contentType, into: &block) }
        for header in request.otherHeaders { writeLiteral(name: header.name, value: header.value, into: &block) }
        if let body = request.body {
            writeLiteral(nameIndex: Static.contentLength, value: String(body.readableBytes), into: &block)
        }
    }

    /// An indexed field: name and value from the static table (§6.1).
    private static func writeIndexed(_ index: Int, into block: inout ByteBuffer) {
        writeInteger(index, prefixBits: 7, pattern: 0x80, into: &block)
    }

    /// A literal without indexing, or never indexed, with an indexed name (§6.2.2, §6.2.3). The
    /// value is `valueStart` followed by `value`, written one after the other, not joined first.
    private static func writeLiteral(nameIndex: Int, valueStart: StaticString = "", value: String, neverIndexed: Bool = false,
                                     into block: inout ByteBuffer) {
        writeInteger(nameIndex, prefixBits: 4, pattern: neverIndexed ? 0x10 : 0x00, into: &block)
        writeInteger(valueStart.utf8CodeUnitCount + value.utf8.count, prefixBits: 7, pattern: 0x00, into: &block)
        block.writeStaticString(valueStart)
        block.writeString(value)
    }

    /// A literal without indexing of the path, its parts written one after the other (§6.2.2).
    private static func writeLiteral(nameIndex: Int, path: RequestPath, into block: inout ByteBuffer) {
        writeInteger(nameIndex, prefixBits: 4, pattern: 0x00, into: &block)
        writeInteger(path.utf8Count, prefixBits: 7, pattern: 0x00, into: &block)
        block.writeString(path.start)
        block.writeString(path.middle)
        block.writeStaticString(path.end)
    }

    /// A never-indexed literal of the authorization field: `valueStart`, then the token's text
    /// written in place (§6.2.3).
    private static func writeLiteral(nameIndex: Int, valueStart: StaticString, token: any BearerToken, into block: inout ByteBuffer) {
        let count = token.utf8Count
        writeInteger(nameIndex, prefixBits: 4, pattern: 0x10, into: &block)
        writeInteger(valueStart.utf8CodeUnitCount + count, prefixBits: 7, pattern: 0x00, into: &block)
        block.writeStaticString(valueStart)
        block.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { output in
            token.write(into: output)
            return count
        }
    }

    /// A literal without indexing with a literal name (§6.2.2); names are lower case already.
    private static func writeLiteral(name: String, value: String, into block: inout ByteBuffer) {
        block.writeInteger(UInt8(0))
        writeString(name, into: &block)
        writeString(value, into: &block)
    }

    /// A string literal without Huffman coding (§5.2).
    private static func writeString(_ string: String, into block: inout ByteBuffer) {
        writeInteger(string.utf8.count, prefixBits: 7, pattern: 0x00, into: &block)
        block.writeString(string)
    }

    /// An integer with an N-bit prefix (§5.1).
    static func writeInteger(_ value: Int, prefixBits: Int, pattern: UInt8, into block: inout ByteBuffer) {
        let limit = (1 << prefixBits) - 1
        guard value >= limit else {
            block.writeInteger(pattern | UInt8(value))
            return
        }
        block.writeInteger(pattern | UInt8(limit))
        var rest = value - limit
        while rest >= 128 {
            block.writeInteger(UInt8(rest & 0x7F | 0x80))
            rest >>= 7
        }
        block.writeInteger(UInt8(rest))
    }
}
