/**
 * The calling side of a call between two JVMs: requests http://127.0.0.1:PORT/hello/I for I in
 * 0..N, one after another, each in Client.fetch (reading the response code, then the body).
 * Prints "calls=N".
 *
 * Usage: java HttpCaller PORT N
 */
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;

public class HttpCaller {
    static class Client {
        static int fetch(int port, int i) throws java.io.IOException {
            URL url = new URL("http://127.0.0.1:" + port + "/hello/" + i);
            HttpURLConnection connection = (HttpURLConnection) url.openConnection();
            int code = connection.getResponseCode();
            try (InputStream in = connection.getInputStream()) {
                in.readAllBytes();
            }
            connection.disconnect();
            return code;
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        int calls = Integer.parseInt(args[1]);
        for (int i = 0; i < calls; i++) {
            if (Client.fetch(port, i) != 200) {
                throw new IllegalStateException("call " + i + " failed");
            }
        }
        System.out.println("calls=" + calls);
    }
}
