import NIOCore

/// gRPC's length-prefixed message: a flag byte (0, not compressed) and the length as four bytes
/// big-endian, then the message. The client and the emulator both frame and read with it.
package enum GRPCFrame {
    package static func framing(_ message: [UInt8]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(5 + message.count)
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(UInt32(message.count))
        buffer.writeBytes(message)
        return buffer
    }

    /// The message of a body holding exactly one uncompressed frame; nil otherwise.
    package static func message(in body: ByteBuffer) -> [UInt8]? {
        var body = body
        guard let compressed = body.readInteger(as: UInt8.self), compressed == 0,
              let length = body.readInteger(as: UInt32.self), body.readableBytes == Int(length)
        else { return nil }
        return body.readBytes(length: body.readableBytes)
    }
}
