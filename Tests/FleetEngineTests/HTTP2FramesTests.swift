@testable import Egress
import NIOCore
import NIOHPACK
import NIOHTTP2
import Testing

/// The relay's HTTP/2 framing and request header blocks, read back by independent code:
/// NIOHPACK decodes the header blocks. The socket-level behaviour (SETTINGS, windows, GOAWAY,
/// resets, PINGs) is tested against real servers in `HTTP2TransportTests` and `GRPCPeerTests`.
struct HTTP2FramesTests {
    private let token = "Bearer " + String(repeating: "eyJhbGciOiJSUzI1NiJ9.", count: 40)

    private func decoded(_ request: EgressRequest, authority: String = "fleetengine.googleapis.com") throws -> HPACKHeaders {
        var block = ByteBuffer()
        RequestHeaderBlock.write(request, authority: authority, into: &block)
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(block.readableBytes == 0)
        return headers
    }

    @Test func aRESTUpdateDecodesToItsHeadersInOrderWithTheTokenNeverIndexed() throws {
        let body = ByteBuffer(string: #"{"lastLocation":{}}"#)
        let request = EgressRequest(method: "POST", path: "/v1/providers/p/vehicles/v-1:updateLocation?x=1",
                                    authorization: token, contentType: "application/json", body: body)
        let headers = try decoded(request)
        #expect(headers.map { "\($0.name): \($0.value)" } == [
            ":method: POST", ":scheme: https", ":authority: fleetengine.googleapis.com",
            ":path: /v1/providers/p/vehicles/v-1:updateLocation?x=1", "authorization: \(token)",
            "content-type: application/json", "content-length: \(body.readableBytes)",
        ])
        #expect(headers.first { $0.name == "authorization" }?.indexable == .neverIndexed)
        #expect(headers.allSatisfy { $0.name == "authorization" || $0.indexable != .neverIndexed })
    }

    @Test func aBearerTokenGivenApartIsTheSameNeverIndexedHeaderAsTheWholeValue() throws {
        let bare = String(token.dropFirst("Bearer ".count))
        for length in [0, 1, 119, 120, 1_000, 20_000] {  // the value's length prefix past 127 takes more bytes
            let tokenOfLength = String(bare.prefix(length)) + String(repeating: "x", count: max(0, length - bare.count))
            var whole = ByteBuffer(), apart = ByteBuffer()
            RequestHeaderBlock.write(EgressRequest(method: "GET", path: "/", authorization: "Bearer " + tokenOfLength),
                                     authority: "a", into: &whole)
            RequestHeaderBlock.write(EgressRequest(method: "GET", path: "/", bearerToken: tokenOfLength), authority: "a", into: &apart)
            #expect(apart == whole, "token of \(length) bytes")
        }
        let headers = try decoded(EgressRequest(method: "GET", path: "/", bearerToken: "t0k3n"))
        #expect(headers.first(name: "authorization") == "Bearer t0k3n")
        #expect(headers.first { $0.name == "authorization" }?.indexable == .neverIndexed)
    }

    @Test func aGRPCCallCarriesItsOwnHeadersAndAGetHasNoLength() throws {
        let call = EgressRequest(method: "POST", path: "/maps.fleetengine.v1.VehicleService/UpdateVehicle", authorization: token,
                                 contentType: "application/grpc",
                                 otherHeaders: [("te", "trailers"), ("grpc-timeout", "10000m")], body: ByteBuffer(bytes: [0, 0, 0, 0, 0]))
        #expect(try decoded(call).map(\.name) == [":method", ":scheme", ":authority", ":path", "authorization", "content-type",
                                                 "te", "grpc-timeout", "content-length"])
        let read = try decoded(EgressRequest(method: "GET", path: "/v1/providers/p/vehicles/v-1", authorization: token))
        #expect(read.first(name: ":method") == "GET")
        #expect(read.first(name: "content-length") == nil)
        let other = try decoded(EgressRequest(method: "PATCH", path: "/"))
        #expect(other.first(name: ":method") == "PATCH")
    }

    @Test func integersPastTheirPrefixContinueInSevenBitGroups() {
        // RFC 7541 C.1: 10 and 1337 with a 5-bit prefix.
        for (value, bytes) in [(10, [0x0A]), (1337, [0x1F, 0x9A, 0x0A]), (31, [0x1F, 0x00])] as [(Int, [UInt8])] {
            var buffer = ByteBuffer()
            RequestHeaderBlock.writeInteger(value, prefixBits: 5, pattern: 0, into: &buffer)
            #expect(Array(buffer.readableBytesView) == bytes, "\(value)")
        }
    }

    @Test func framesSplitAnywhereAcrossReadsComeOutWhole() throws {
        var wire = ByteBuffer()
        wire.writeSettings([(0x3, 100), (0x4, 1 << 20)])
        wire.writePing(42, acknowledging: true)
        wire.writeData(ByteBuffer(string: "hello"), stream: 3, endStream: true)
        wire.writeWindowUpdate(1000, stream: .rootStream)
        let bytes = Array(wire.readableBytesView)
        for split in 0...bytes.count {
            var reader = HTTP2FrameReader()
            var frames: [HTTP2ReadFrame] = []
            for part in [bytes[..<split], bytes[split...]] {
                reader.append(ByteBuffer(bytes: part))
                while let frame = try reader.next() { frames.append(frame) }
            }
            #expect(frames.map(\.type) == [.settings, .ping, .data, .windowUpdate], "split at \(split)")
            #expect(frames[1].flags.contains(.ack))
            #expect(frames[2].streamID == 3 && frames[2].flags.contains(.endStream))
            #expect(frames[2].payload == ByteBuffer(string: "hello"))
        }
    }

    @Test func paddingAndPriorityAreLeftOutOfThePayload() throws {
        var wire = ByteBuffer()
        // DATA, padded: pad length 3, "abc", three bytes of padding.
        wire.writeFrameHeader(length: 7, type: .data, flags: [.padded, .endStream], stream: 1)
        wire.writeBytes([3] + Array("abc".utf8) + [0, 0, 0])
        // HEADERS, padded and with priority: pad length 1, five priority bytes, one fragment byte, padding.
        wire.writeFrameHeader(length: 8, type: .headers, flags: [.padded, .priority, .endHeaders], stream: 1)
        wire.writeBytes([1, 0, 0, 0, 0, 16, 0x88, 0])
        var reader = HTTP2FrameReader()
        reader.append(wire)
        #expect(try reader.next()?.unpadded() == ByteBuffer(string: "abc"))
        #expect(try reader.next()?.unpadded() == ByteBuffer(bytes: [0x88]))

        var bad = ByteBuffer()
        bad.writeFrameHeader(length: 2, type: .data, flags: .padded, stream: 1)
        bad.writeBytes([5, 0])
        reader.append(bad)
        #expect(throws: HTTP2ConnectionError.self) { try reader.next()?.unpadded() }
    }

    @Test func aFrameLongerThanTheLimitEndsTheConnectionAndUnknownTypesAreReadPast() throws {
        var reader = HTTP2FrameReader()
        var unknown = ByteBuffer()
        unknown.writeBytes([0, 0, 2, 0xFA, 0, 0, 0, 0, 0, 1, 2])
        reader.append(unknown)
        let frame = try reader.next()
        #expect(frame != nil && frame?.type == nil)
        var huge = ByteBuffer()
        huge.writeFrameHeader(length: HTTP2FrameReader.maximumFrameSize + 1, type: .data, stream: 1)
        reader.append(huge)
        #expect(throws: HTTP2ConnectionError.frameSizeError("a frame of 16385 bytes")) { try reader.next() }
    }

    @Test func aHeaderBlockPastTheFrameSizeGoesOnInContinuationFrames() throws {
        var block = ByteBuffer()
        RequestHeaderBlock.write(EgressRequest(method: "POST", path: "/", authorization: "Bearer " + String(repeating: "t", count: 40_000)),
                                 authority: "a", into: &block)
        var wire = ByteBuffer()
        wire.writeHeaders(block, stream: 5, endStream: true, maximumFrameSize: 16_384)
        var reader = HTTP2FrameReader()
        reader.append(wire)
        var frames: [HTTP2ReadFrame] = []
        while let frame = try reader.next() { frames.append(frame) }
        #expect(frames.map(\.type) == [.headers, .continuation, .continuation])
        #expect(frames.map { $0.flags.contains(.endHeaders) } == [false, false, true])
        #expect(frames[0].flags.contains(.endStream))
        var joined = ByteBuffer()
        for var frame in frames { joined.writeBuffer(&frame.payload) }
        #expect(joined == block)
    }
}

/// Answers' header blocks are checked as RFC 9113 §8.2 and §8.3.2 require.
struct HTTP2AnswerHeaderTests {
    private func check(_ fields: [(String, String)], trailers: Bool = false) -> String? {
        HTTP2StreamsHandler.malformation(of: HPACKHeaders(fields), trailers: trailers)
    }

    @Test func wellFormedHeadersAndTrailersPass() {
        #expect(check([(":status", "200"), ("content-type", "application/json"), ("retry-after", "3")]) == nil)
        #expect(check([("grpc-status", "0"), ("grpc-message", "")], trailers: true) == nil)
    }

    @Test func malformedBlocksAreNamed() {
        #expect(check([("content-type", "x")]) == "no :status")
        #expect(check([("content-type", "x"), (":status", "200")]) == "the pseudo-header :status where none may be")
        #expect(check([(":status", "200"), (":path", "/")]) == "the pseudo-header :path where none may be")
        #expect(check([(":status", "200")], trailers: true) == "the pseudo-header :status where none may be")
        #expect(check([(":status", "200"), ("Content-Type", "x")]) == "an upper-case field name")
        #expect(check([(":status", "200"), ("connection", "close")]) == "the connection-specific field connection")
        #expect(check([(":status", "200"), ("te", "gzip")]) == "the connection-specific field te")
        #expect(check([(":status", "200"), ("x", "a\r\nb")]) == "a field value with NUL, CR or LF")
    }
}
