import NIOCore
import NIOHTTP2

/// HTTP/2's frames (RFC 9113 §4 and §6) as the relay's client reads and writes them: a
/// frame header and its payload, without stream state. The connection's meaning of each
/// frame is `HTTP2StreamsHandler`'s.
enum HTTP2FrameType: UInt8 {
    case data = 0, headers = 1, priority = 2, rstStream = 3, settings = 4, pushPromise = 5, ping = 6,
         goAway = 7, windowUpdate = 8, continuation = 9
}

struct HTTP2FrameFlags: OptionSet {
    let rawValue: UInt8
    static let endStream = HTTP2FrameFlags(rawValue: 0x1)
    static let ack = HTTP2FrameFlags(rawValue: 0x1)
    static let endHeaders = HTTP2FrameFlags(rawValue: 0x4)
    static let padded = HTTP2FrameFlags(rawValue: 0x8)
    static let priority = HTTP2FrameFlags(rawValue: 0x20)
}

/// Why the connection must end (RFC 9113 §5.4.1): the GOAWAY's code and the reason logged.
struct HTTP2ConnectionError: Error, Equatable {
    let code: HTTP2ErrorCode
    let reason: String

    static func protocolError(_ reason: String) -> HTTP2ConnectionError { .init(code: .protocolError, reason: reason) }
    static func frameSizeError(_ reason: String) -> HTTP2ConnectionError { .init(code: .frameSizeError, reason: reason) }
}

/// One frame read: its header, and its payload as a slice of what was read (no copy).
struct HTTP2ReadFrame {
    /// nil: a type this client does not know, which it ignores (RFC 9113 §4.1).
    let type: HTTP2FrameType?
    let flags: HTTP2FrameFlags
    let streamID: HTTP2StreamID
    var payload: ByteBuffer

    /// The payload of a DATA or HEADERS frame without its padding (and HEADERS without its
    /// priority fields).
    func unpadded() throws(HTTP2ConnectionError) -> ByteBuffer {
        var payload = payload
        var padding = 0
        if flags.contains(.padded) {
            guard let length = payload.readInteger(as: UInt8.self) else { throw .frameSizeError("padded frame without its pad length") }
            padding = Int(length)
        }
        if type == .headers, flags.contains(.priority) {
            guard payload.readSlice(length: 5) != nil else { throw .frameSizeError("HEADERS too short for its priority") }
        }
        guard padding <= payload.readableBytes else { throw .protocolError("padding longer than the frame") }
        return payload.getSlice(at: payload.readerIndex, length: payload.readableBytes - padding)!
    }
}

/// Frames out of the bytes read, as they arrive; a frame split across reads waits for its
/// rest. Frames longer than the largest this client accepts end the connection.
struct HTTP2FrameReader {
    /// SETTINGS_MAX_FRAME_SIZE left at its initial value (RFC 9113 §6.5.2).
    static let maximumFrameSize = 16_384
    static let headerLength = 9

    private var buffered: ByteBuffer?

    /// Appends bytes read.
    mutating func append(_ bytes: ByteBuffer) {
        if buffered == nil || buffered!.readableBytes == 0 {
            buffered = bytes
        } else {
            var bytes = bytes
            buffered!.writeBuffer(&bytes)
        }
    }

    /// The next whole frame, or nil until more bytes arrive.
    mutating func next() throws(HTTP2ConnectionError) -> HTTP2ReadFrame? {
        guard var bytes = buffered, bytes.readableBytes >= Self.headerLength else { return nil }
        let start = bytes.readerIndex
        let lengthHigh = Int(bytes.getInteger(at: start, as: UInt8.self)!)
        let length = lengthHigh << 16 | Int(bytes.getInteger(at: start + 1, as: UInt16.self)!)
        guard length <= Self.maximumFrameSize else { throw .frameSizeError("a frame of \(length) bytes") }
        guard bytes.readableBytes >= Self.headerLength + length else { return nil }
        let type = bytes.getInteger(at: start + 3, as: UInt8.self)!
        let flags = HTTP2FrameFlags(rawValue: bytes.getInteger(at: start + 4, as: UInt8.self)!)
        let stream = bytes.getInteger(at: start + 5, as: UInt32.self)! & 0x7FFF_FFFF
        let payload = bytes.getSlice(at: start + Self.headerLength, length: length)!
        bytes.moveReaderIndex(forwardBy: Self.headerLength + length)
        buffered = bytes.readableBytes == 0 ? nil : bytes
        return HTTP2ReadFrame(type: HTTP2FrameType(rawValue: type), flags: flags, streamID: HTTP2StreamID(Int32(stream)),
                              payload: payload)
    }
}

/// Writes frames into one buffer, which leaves in one write (and one TLS record) per
/// event-loop turn.
extension ByteBuffer {
    static let http2Preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    mutating func writeFrameHeader(length: Int, type: HTTP2FrameType, flags: HTTP2FrameFlags = [], stream: HTTP2StreamID) {
        writeInteger(UInt8(truncatingIfNeeded: length >> 16))
        writeInteger(UInt16(truncatingIfNeeded: length))
        writeInteger(type.rawValue)
        writeInteger(flags.rawValue)
        writeInteger(UInt32(Int32(stream)))
    }

    mutating func writeSettings(_ settings: [(identifier: UInt16, value: UInt32)]) {
        writeFrameHeader(length: 6 * settings.count, type: .settings, stream: .rootStream)
        for setting in settings {
            writeInteger(setting.identifier)
            writeInteger(setting.value)
        }
    }

    mutating func writeSettingsAcknowledgement() {
        writeFrameHeader(length: 0, type: .settings, flags: .ack, stream: .rootStream)
    }

    mutating func writePing(_ data: UInt64, acknowledging: Bool) {
        writeFrameHeader(length: 8, type: .ping, flags: acknowledging ? .ack : [], stream: .rootStream)
        writeInteger(data)
    }

    mutating func writeWindowUpdate(_ increment: Int, stream: HTTP2StreamID) {
        writeFrameHeader(length: 4, type: .windowUpdate, stream: stream)
        writeInteger(UInt32(increment))
    }

    mutating func writeResetStream(_ stream: HTTP2StreamID, code: HTTP2ErrorCode) {
        writeFrameHeader(length: 4, type: .rstStream, stream: stream)
        writeInteger(UInt32(code.networkCode))
    }

    mutating func writeGoAway(lastStream: HTTP2StreamID, code: HTTP2ErrorCode) {
        writeFrameHeader(length: 8, type: .goAway, stream: .rootStream)
        writeInteger(UInt32(Int32(lastStream)))
        writeInteger(UInt32(code.networkCode))
    }

    /// A header block as HEADERS and, past the peer's frame size, CONTINUATION frames.
    mutating func writeHeaders(_ block: ByteBuffer, stream: HTTP2StreamID, endStream: Bool, maximumFrameSize: Int) {
        var block = block
        var type = HTTP2FrameType.headers
        repeat {
            let fragment = block.readSlice(length: Swift.min(block.readableBytes, maximumFrameSize))!
            var flags: HTTP2FrameFlags = block.readableBytes == 0 ? .endHeaders : []
            if type == .headers, endStream { flags.insert(.endStream) }
            writeFrameHeader(length: fragment.readableBytes, type: type, flags: flags, stream: stream)
            writeImmutableBuffer(fragment)
            type = .continuation
        } while block.readableBytes > 0
    }

    mutating func writeData(_ data: ByteBuffer, stream: HTTP2StreamID, endStream: Bool) {
        writeFrameHeader(length: data.readableBytes, type: .data, flags: endStream ? .endStream : [], stream: stream)
        writeImmutableBuffer(data)
    }
}
